"""zerotrain: DeepSpeed's ZeRO training engine in C++ on LibTorch, behind DeepSpeed's Python API.

    import zerotrain as deepspeed
    engine, optimizer, loader, scheduler = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config="ds_config.json")
    loss = criterion(engine(batch)); engine.backward(loss); engine.step()

The extension module (_C) was compiled against one torch; another torch in this Python is refused
here, before it is loaded, since the two would disagree on every C++ type they share.
"""
import torch

from zerotrain import _build_info

__version__ = _build_info.VERSION


def _check_torch():
    have = torch.__version__.split("+")[0]
    if have != _build_info.TORCH_VERSION:
        raise ImportError(
            f"zerotrain {__version__} was built against torch {_build_info.TORCH_VERSION}, "
            f"but this Python has torch {have}; install torch=={_build_info.TORCH_VERSION}")


_check_torch()

from zerotrain import _C  # noqa: E402  (after the check above)
from zerotrain import checkpointing, zero  # noqa: E402,F401
from zerotrain.comm import init_distributed  # noqa: E402,F401
from zerotrain.engine import ZeroEngine, initialize  # noqa: E402,F401

DeepSpeedEngine = ZeroEngine
