"""initialize and ZeroEngine: deepspeed.initialize and DeepSpeedEngine over zerotrain's C++ Engine.

The engine trains the module's own tensors: it re-points each trainable parameter at its storage
(flat buffers at stages 0-2; at stage 3 a shard, gathered while forward and backward read it), so
the module keeps working as the user wrote it, and every ZeRO decision is the C++ Engine's.
"""
import base64
import json
import os
import pickle
import weakref

import torch

from zerotrain import _C
from zerotrain import client_optimizer, comm
from zerotrain.optimizer import ZeroLrScheduler, ZeroOptimizer

_CLIENT_STATE_KEY = "python.client_state"  # the pickled dict save_checkpoint was given

_pending_zero_init = None  # the newest zero.Init's parts, until an engine adopts them
_engines = weakref.WeakSet()  # the live ZeroEngines, for zero.GatheredParameters


def _model_tensors(module):
    """(name, tensor, submodule) per trainable parameter in registration order, each tensor once;
    the frozen parameters; the buffers: what the C++ ModelTensors holds."""
    trainable, frozen, seen = [], [], set()
    for index, (prefix, sub) in enumerate(module.named_modules(remove_duplicate=False)):
        for name, p in sub.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if p.requires_grad:
                trainable.append((f"{prefix}.{name}" if prefix else name, p, index))
            else:
                frozen.append(p)
    buffers = [b for b in module.buffers()]
    return trainable, frozen, buffers


def _load_config(config, world_size, optimizer_section=None):
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        if optimizer_section is None:
            return _C.load_config(path, None, world_size)
        try:
            with open(path) as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"initialize: config {path}: {e}") from None
        label = f"{path} with the client optimizer"
    elif isinstance(config, dict):
        label = "<config dict>"
    else:
        raise ValueError(f"initialize: config must be a path or a dict, not "
                         f"{type(config).__name__}")
    if optimizer_section is not None:
        if "optimizer" in config:
            raise ValueError(f"initialize: an optimizer was given both as the optimizer argument "
                             f"and in {label.split(' with ')[0]}'s \"optimizer\" section; give one")
        config = {**config, "optimizer": optimizer_section}
    return _C.load_config(label, json.dumps(config), world_size)


class ZeroEngine(torch.nn.Module):
    """What initialize returns first: call it as the module, then backward(loss) and step()."""

    def __init__(self, module, config, group):
        super().__init__()
        self.module = module
        self._config = config
        self._group = group
        params = list(module.parameters())
        device = str(params[0].device) if params else "cpu"
        trainable, frozen, buffers = _model_tensors(module)
        self._trainable = [t for _, t, _ in trainable]
        # The parts zero.Init cut as this model was built, which the engine adopts (once).
        global _pending_zero_init
        zero_init, _pending_zero_init = _pending_zero_init, None
        self._engine = _C.Engine(group, config, device, trainable, frozen, buffers, zero_init)
        _engines.add(self)

    # The forward scope is open while the module runs: stage 3 gathers what it reads.
    def forward(self, *args, **kwargs):
        self._engine.begin_forward()
        try:
            return self.module(*args, **kwargs)
        finally:
            self._engine.end_forward()

    def backward(self, loss, retain_graph=False, scale_wrt_gas=True):
        if retain_graph or not scale_wrt_gas:
            raise NotImplementedError(
                "backward: retain_graph=True and scale_wrt_gas=False are not supported")
        self._engine.backward(loss)
        return loss

    def step(self, lr_kwargs=None):
        if lr_kwargs is not None:
            raise NotImplementedError("step: lr_kwargs is not supported")
        self._engine.step()

    def is_gradient_accumulation_boundary(self):
        return self._engine.at_accumulation_boundary

    def train_micro_batch_size_per_gpu(self):
        return self._config.micro_batch_size

    def gradient_accumulation_steps(self):
        return self._config.gradient_accumulation_steps

    def train_batch_size(self):
        return self._config.train_batch_size

    def zero_optimization_stage(self):
        return self._config.stage

    def get_lr(self):
        # As DeepSpeed's: after a step, the lr its scheduler set for the next one.
        return [self._engine.next_lr]

    def get_global_grad_norm(self):
        return self._engine.grad_norm

    @property
    def global_steps(self):
        # DeepSpeed counts every boundary, a skipped fp16 step too.
        return self._engine.optimizer_steps + self._engine.skipped_steps

    @property
    def skipped_steps(self):
        # Boundaries whose fp16 gradients overflowed: the step was skipped, the loss scale cut.
        return self._engine.skipped_steps

    @property
    def global_samples(self):
        return self.global_steps * self.train_batch_size()

    @property
    def micro_steps(self):
        return self._engine.micro_steps

    @property
    def global_rank(self):
        return self._group.rank

    @property
    def world_size(self):
        return self._group.world_size

    @property
    def local_rank(self):
        return int(os.environ.get("LOCAL_RANK", "0"))

    def save_checkpoint(self, save_dir, tag=None, client_state={}, save_latest=True,
                        exclude_frozen_parameters=False):
        if not save_latest or exclude_frozen_parameters:
            raise NotImplementedError(
                "save_checkpoint: save_latest=False and exclude_frozen_parameters=True are not "
                "supported")
        state = {_CLIENT_STATE_KEY: base64.b64encode(pickle.dumps(dict(client_state))).decode()}
        self._engine.save_checkpoint(os.fspath(save_dir), "" if tag is None else str(tag), state)
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True, load_lr_scheduler_states=True,
                        load_module_only=False, custom_load_fn=None):
        if (not load_module_strict or not load_optimizer_states or not load_lr_scheduler_states
                or load_module_only or custom_load_fn is not None):
            raise NotImplementedError(
                "load_checkpoint: only the whole training state loads (strict module, optimizer "
                "and scheduler states, no custom_load_fn)")
        load_dir = os.fspath(load_dir)
        if tag is None:
            latest = os.path.join(load_dir, "latest")
            if not os.path.isfile(latest):
                # As DeepSpeed: nothing to resume from is not an error.
                if self.global_rank == 0:
                    print(f"zerotrain: no checkpoint in {load_dir} ({latest} is missing)")
                return None, None
            with open(latest) as f:
                tag = f.read().strip()
        saved = self._engine.load_checkpoint(load_dir, str(tag))
        client_state = {}
        if _CLIENT_STATE_KEY in saved:
            client_state = pickle.loads(base64.b64decode(saved[_CLIENT_STATE_KEY]))
        return os.path.join(load_dir, str(tag)), client_state


def _check_arguments(model, model_parameters, lr_scheduler, mpu, mesh_param):
    if model is None:
        raise ValueError("initialize: model is required")
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"initialize: model must be a torch.nn.Module, not {type(model).__name__}")
    if lr_scheduler is not None:
        raise NotImplementedError(
            "initialize: a client lr_scheduler is not supported; name it in the config's "
            "\"scheduler\" section")
    if mpu is not None or mesh_param is not None:
        raise NotImplementedError("initialize: mpu and mesh_param (model parallelism) are not "
                                  "supported; zerotrain is data parallel")
    if model_parameters is not None:
        given = list(model_parameters)
        if given and isinstance(given[0], dict):
            raise NotImplementedError("initialize: parameter groups are not supported")
        want = {id(p) for p in model.parameters() if p.requires_grad}
        if {id(p) for p in given} != want:
            raise NotImplementedError(
                "initialize: model_parameters must be the model's trainable parameters (those "
                "with requires_grad); set requires_grad=False on the ones not to train")


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None,
               lr_scheduler=None, distributed_port=None, mpu=None, dist_init_required=None,
               collate_fn=None, config=None, mesh_param=None, config_params=None):
    """deepspeed.initialize: returns (engine, optimizer, training_dataloader, lr_scheduler)."""
    _check_arguments(model, model_parameters, lr_scheduler, mpu, mesh_param)
    if config is None:
        config = config_params
    if config is None and args is not None:
        config = getattr(args, "deepspeed_config", None)
    if config is None:
        raise ValueError("initialize: no config (pass config=, config_params= or "
                         "args.deepspeed_config)")
    section = None if optimizer is None else client_optimizer.optimizer_section(optimizer, model)
    group = comm.init_distributed(distributed_port=distributed_port)
    loaded = _load_config(config, group.world_size, section)
    comm._report_with(loaded)
    engine = ZeroEngine(model, loaded, group)
    loader = None
    if training_data is not None:
        sampler = torch.utils.data.distributed.DistributedSampler(
            training_data, num_replicas=group.world_size, rank=group.rank)
        loader = torch.utils.data.DataLoader(training_data, batch_size=loaded.micro_batch_size,
                                             sampler=sampler, collate_fn=collate_fn)
    scheduler = ZeroLrScheduler(engine) if loaded.has_scheduler else None
    return engine, ZeroOptimizer(engine), loader, scheduler
