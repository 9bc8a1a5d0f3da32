"""zerotrain.zero: deepspeed.zero's GatheredParameters and Init."""
import functools

import torch

from zerotrain import engine as _engine


def _owner(params):
    for e in _engine._engines:
        mine = {id(t) for t in e._trainable}
        if all(id(p) in mine for p in params):
            return e
    return None


class GatheredParameters:
    """While open, `params` hold their full values on every rank (stage 3 gathers them); with a
    modifier_rank, that rank's changes become everyone's at exit. Collective, as DeepSpeed's.
    Parameters no engine trains are left as they are."""

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        if fwd_module is not None:
            raise NotImplementedError("GatheredParameters: fwd_module is not supported")
        if not isinstance(params, (list, tuple)):
            params = [params]
        self._params = list(params)
        self._modifier_rank = -1 if modifier_rank is None else int(modifier_rank)
        self._enabled = enabled
        self._open = None

    def __enter__(self):
        owner = _owner(self._params) if self._enabled and self._params else None
        if owner is not None:
            self._open = owner._engine.gather(self._params, self._modifier_rank)
        return self

    def __exit__(self, *exc):
        if self._open is not None:
            self._open.close()
            self._open = None
        return False


def _all_subclasses(cls):
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


class Init:
    """deepspeed.zero.Init: inside the `with` block, each module's parameters are partitioned
    across the ranks when its outermost __init__ returns (the modules inside it were taken by
    their own), so no rank holds the whole model; initialize then adopts the parts. Needs the
    stage 3 config initialize will get (its bucket size and offload_param decide the parts).
    Partitioned parameters hold nothing (shape [0]) until the engine gathers them, and before
    initialize nothing can gather them: initialization that runs after construction
    (transformers' post_init) has no effect yet, where DeepSpeed gathers inside it."""

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True,
                 remote_device=None, pin_memory=False, config_dict_or_path=None, config=None,
                 enabled=True, dtype=None, mpu=None, **others):
        unsupported = {"module": module, "data_parallel_group": data_parallel_group,
                       "remote_device": remote_device, "dtype": dtype, "mpu": mpu}
        unsupported.update({k: v for k, v in others.items() if v not in (None, False)})
        for name, value in unsupported.items():
            if value is not None:
                raise NotImplementedError(
                    f"zerotrain.zero.Init: {name}= is not supported (offload_param in the config "
                    "says where parameters live)")
        self._config = config_dict_or_path if config_dict_or_path is not None else config
        if enabled and self._config is None:
            raise ValueError("zerotrain.zero.Init: pass the stage 3 config initialize will get "
                             "(config_dict_or_path=)")
        self._enabled = enabled
        self._patched = {}

    def __enter__(self):
        if not self._enabled:
            return self
        from zerotrain import comm
        group = comm.init_distributed()
        loaded = _engine._load_config(self._config, group.world_size)
        init = _engine._C.ZeroInit(group, loaded)

        def partition(module):
            for index, sub in enumerate(module.modules()):
                own = list(sub.parameters(recurse=False))
                if own:
                    init.partition_own(f"{type(sub).__name__} #{index}", own)

        def wrap(original):
            @functools.wraps(original)
            def wrapped(module, *args, **kwargs):
                depth = module.__dict__.get("_zerotrain_init_depth", 0)
                object.__setattr__(module, "_zerotrain_init_depth", depth + 1)
                try:
                    original(module, *args, **kwargs)
                finally:
                    if depth == 0:
                        module.__dict__.pop("_zerotrain_init_depth", None)
                    else:
                        object.__setattr__(module, "_zerotrain_init_depth", depth)
                if depth == 0:
                    partition(module)
            return wrapped

        for cls in [torch.nn.Module] + _all_subclasses(torch.nn.Module):
            if cls is not torch.nn.Module and "__init__" in cls.__dict__:
                self._patched[cls] = cls.__dict__["__init__"]
                cls.__init__ = wrap(cls.__dict__["__init__"])
        # Classes defined inside the block are wrapped as they are made.
        self._subclass_hook = torch.nn.Module.__dict__.get("__init_subclass__")
        patched = self._patched

        def init_subclass(cls, **kwargs):
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
            if "__init__" in cls.__dict__:
                patched[cls] = cls.__dict__["__init__"]
                cls.__init__ = wrap(cls.__dict__["__init__"])

        torch.nn.Module.__init_subclass__ = classmethod(init_subclass)
        _engine._pending_zero_init = init
        return self

    def __exit__(self, *exc):
        if not self._enabled:
            return False
        for cls, original in self._patched.items():
            cls.__init__ = original
        self._patched.clear()
        if self._subclass_hook is None:
            del torch.nn.Module.__init_subclass__
        else:
            torch.nn.Module.__init_subclass__ = self._subclass_hook
        return False
