"""DeepSpeed 0.19.8 as the conformance tests' oracle: what DeepSpeed itself does with a ds_config.

Run by tests/deepspeed/*_test.cc through RunOracle (oracle.h) with the project venv's python.
Each subcommand reads inputs the C++ test wrote and prints one JSON object on stdout:

  lr <dir> <steps>   for every <dir>/*.json: the lr and Adam betas in the optimizer's param
                     group at each of <steps> optimizer steps of a real deepspeed.initialize()
                     engine (one process, gloo), i.e. what each step ran with.
  scaler <dir>       for every <dir>/*.json (a ds_config with an fp16 section and a "pattern"
                     key, one 0/1 per step, 1 = that step overflowed): the loss scaler
                     DeepSpeed's ZeRO optimizers create from it (CreateLossScaler) fed the
                     pattern; the scale and hysteresis each step ran with, and the step at which
                     update_scale raised (-1 for none).
  accepts <dir>      for every <dir>/*.json: "ok" when DeepSpeedConfig accepts it, else
                     "error: " and the first line of what it raised.
  defaults <dir>     for every <dir>/*.json: the values DeepSpeedConfig resolves for the keys
                     zerotrain shares with it, under zerotrain's dotted field names (DEFAULTS).
  fields             every key DeepSpeedConfig reads, per section (the optimizer section's too) (dotted path, "" = the top
                     level): for a section DeepSpeed holds as a pydantic model, the model's fields;
                     for one it reads as a plain dict, the keys it looks up in it (and the default
                     it passes to get()). Each section: whether DeepSpeed rejects keys it does not
                     know ("strict"), its fields (alias, default as JSON, has_default), and the
                     keys DeepSpeed refuses as removed features.
  optimizer          for each optimizer path zerotrain accepts (OPTIMIZER_PATHS: a ds_config's
                     optimizer and zero sections): the class deepspeed.initialize() constructs
                     (DeepSpeed's own classes are stopped at their constructor, so CUDA-only ones
                     need not build), its keywords and defaults (inspect.signature), the keywords
                     the engine passes itself, the params keys a user may write (the constructor's
                     keywords the engine does not pass, and the keys the engine reads from params
                     itself), the defaults DeepSpeed really runs with (a torch optimizer's
                     param_groups[0] after initialize(); else the signature's defaults with the
                     engine's keywords), DeepSpeed's verdict on a misspelt keyword and on
                     max_grad_norm; and the keys DeepSpeedConfig reads in the optimizer section.
"""
import glob
import json
import logging
import os
import socket
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_single_process():
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    import deepspeed
    from deepspeed.utils import logger
    logger.setLevel(logging.ERROR)
    init_distributed(deepspeed)
    return deepspeed


def init_distributed(deepspeed, **kwargs):
    """deepspeed.init_distributed over gloo, less the shared-memory op that DeepSpeed's CPU
    backend compiles at start-up: it serves inference_all_reduce alone (deepspeed/comm/torch.py),
    never the training collectives the oracles are compared on, and compiling it costs about 45
    CPU-seconds in every new venv (a fresh clone's CI run pays it)."""
    ops = deepspeed.ops.__compatible_ops__
    if "deepspeed_shm_comm" not in ops:
        raise RuntimeError(f"DeepSpeed's ops no longer name deepspeed_shm_comm: {sorted(ops)}")
    ops["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo", **kwargs)


def cases(directory):
    """(name, config) for every <directory>/<name>.json, in name order."""
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            yield os.path.basename(path)[:-len(".json")], json.load(f)


def lr_sequences(directory, steps):
    deepspeed = init_single_process()
    import torch
    out = {}
    for name, config in cases(directory):
        # DeepSpeed's default Adam on CPU is FusedAdam, a CUDA op; torch_adam picks
        # torch.optim.Adam(W), whose param groups the scheduler drives the same way.
        config["optimizer"].setdefault("params", {})["torch_adam"] = True
        model = torch.nn.Linear(2, 1)
        engine, optimizer, _, _ = deepspeed.initialize(model=model,
                                                      model_parameters=model.parameters(),
                                                      config=config)
        seq = []
        for _ in range(steps):
            engine.backward(engine(torch.ones(1, 2)).sum())
            group = optimizer.param_groups[0]
            seq.append([group["lr"], group["betas"][0], group["betas"][1]])
            engine.step()
        out[name] = seq
    return out


def scaler_sequences(directory):
    init_single_process()
    import torch
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler
    out = {}
    for name, config in cases(directory):
        pattern = config.pop("pattern")
        fp16 = DeepSpeedConfig(config).float16_config
        # What stage_1_and_2.py and stage3.py pass (engine.loss_scale(), dynamic_loss_scale()).
        scaler = CreateLossScaler(dtype=torch.half, static_loss_scale=fp16.loss_scale,
                                  dynamic_scaling=fp16.loss_scale == 0,
                                  dynamic_loss_args=fp16.dynamic_loss_scale_args())
        scales, hysteresis, raised = [], [], -1
        for step, overflow in enumerate(pattern):
            scales.append(float(scaler.cur_scale))
            hysteresis.append(getattr(scaler, "cur_hysteresis", 0))
            try:
                scaler.update_scale(overflow == "1")
            except Exception:
                raised = step
                break
        out[name] = {"scales": scales, "hysteresis": hysteresis, "raised": raised}
    return out


def accepts(directory):
    init_single_process()
    from deepspeed.runtime.config import DeepSpeedConfig
    out = {}
    for name, config in cases(directory):
        try:
            DeepSpeedConfig(config)
            verdict = "ok"
        except Exception as e:  # pydantic's ValidationError, ValueError, ...
            verdict = "error: " + (str(e).strip().splitlines() or [type(e).__name__])[0]
        out[name] = verdict
    return out


# zerotrain's field (the effective TrainerConfigProto's dotted path) -> how DeepSpeed 0.19.8's
# resolved config holds it. None in DeepSpeed means "off" where zerotrain writes 0. A reader that
# raises AttributeError (a section DeepSpeed builds only when the file has it) skips the field.
DEFAULTS = {
    "gradient_clipping": lambda c: c.gradient_clipping,
    "steps_per_print": lambda c: c.steps_per_print or 0,
    "wall_clock_breakdown": lambda c: c.wall_clock_breakdown,
    "zero_optimization.stage": lambda c: c.zero_config.stage,
    "zero_optimization.overlap_comm": lambda c: c.zero_config.overlap_comm,
    "zero_optimization.contiguous_gradients": lambda c: c.zero_config.contiguous_gradients,
    "zero_optimization.reduce_scatter": lambda c: c.zero_config.reduce_scatter,
    "zero_optimization.reduce_bucket_size": lambda c: c.zero_config.reduce_bucket_size,
    "zero_optimization.allgather_partitions": lambda c: c.zero_config.allgather_partitions,
    "zero_optimization.allgather_bucket_size": lambda c: c.zero_config.allgather_bucket_size,
    "zero_optimization.round_robin_gradients": lambda c: c.zero_config.round_robin_gradients,
    "zero_optimization.ignore_unused_parameters": lambda c: c.zero_config.ignore_unused_parameters,
    "zero_optimization.load_from_fp32_weights": lambda c: c.zero_config.load_from_fp32_weights,
    "zero_optimization.elastic_checkpoint": lambda c: c.zero_config.elastic_checkpoint,
    "zero_optimization.sub_group_size": lambda c: c.zero_config.sub_group_size,
    "zero_optimization.stage3_prefetch_bucket_size": lambda c: c.zero_config.prefetch_bucket_size,
    "zero_optimization.stage3_param_persistence_threshold":
        lambda c: c.zero_config.param_persistence_threshold,
    "zero_optimization.stage3_max_live_parameters": lambda c: c.zero_config.max_live_parameters,
    "zero_optimization.stage3_max_reuse_distance": lambda c: c.zero_config.max_reuse_distance,
    "zero_optimization.stage3_gather_16bit_weights_on_model_save":
        lambda c: c.zero_config.gather_16bit_weights_on_model_save,
    "zero_optimization.memory_efficient_linear": lambda c: c.zero_config.memory_efficient_linear,
    "zero_optimization.offload_optimizer.pin_memory":
        lambda c: c.zero_config.offload_optimizer.pin_memory,
    "zero_optimization.offload_optimizer.buffer_count":
        lambda c: c.zero_config.offload_optimizer.buffer_count,
    "zero_optimization.offload_param.pin_memory": lambda c: c.zero_config.offload_param.pin_memory,
    "zero_optimization.offload_param.buffer_count":
        lambda c: c.zero_config.offload_param.buffer_count,
    "zero_optimization.offload_param.buffer_size": lambda c: c.zero_config.offload_param.buffer_size,
    "zero_optimization.offload_param.max_in_cpu": lambda c: c.zero_config.offload_param.max_in_cpu,
    "fp16.loss_scale": lambda c: c.float16_config.loss_scale,
    "fp16.initial_scale_power": lambda c: c.float16_config.initial_scale_power,
    "fp16.loss_scale_window": lambda c: c.float16_config.loss_scale_window,
    "fp16.hysteresis": lambda c: c.float16_config.hysteresis,
    "fp16.consecutive_hysteresis": lambda c: c.float16_config.consecutive_hysteresis,
    "fp16.min_loss_scale": lambda c: c.float16_config.min_loss_scale,
    "bf16.check_grad_overflow": lambda c: c.bfloat16_config.check_grad_overflow,
    "prescale_gradients": lambda c: c.prescale_gradients,
    "gradient_predivide_factor": lambda c: c.gradient_predivide_factor,
    "zero_allow_untested_optimizer": lambda c: c.zero_allow_untested_optimizer,
    "zero_force_ds_cpu_optimizer": lambda c: c.zero_force_ds_cpu_optimizer,
    "zero_optimization.zero_hpz_partition_size": lambda c: c.zero_config.zero_hpz_partition_size,
    "zero_optimization.zero_quantized_weights": lambda c: c.zero_config.zero_quantized_weights,
    "zero_optimization.zero_quantized_gradients": lambda c: c.zero_config.zero_quantized_gradients,
    "zero_optimization.offload_optimizer.device": lambda c: c.zero_config.offload_optimizer.device,
    "zero_optimization.offload_optimizer.pipeline_read":
        lambda c: c.zero_config.offload_optimizer.pipeline_read,
    "zero_optimization.offload_optimizer.pipeline_write":
        lambda c: c.zero_config.offload_optimizer.pipeline_write,
    "zero_optimization.offload_optimizer.fast_init":
        lambda c: c.zero_config.offload_optimizer.fast_init,
    "zero_optimization.offload_optimizer.ratio": lambda c: c.zero_config.offload_optimizer.ratio,
    "zero_optimization.offload_param.device": lambda c: c.zero_config.offload_param.device,
    "fp16.enabled": lambda c: c.float16_config.enabled,
    "fp16.auto_cast": lambda c: c.float16_config.auto_cast,
    "fp16.fp16_master_weights_and_grads": lambda c: c.float16_config.fp16_master_weights_and_grads,
    "bf16.enabled": lambda c: c.bfloat16_config.enabled,
    # tensorboard/csv_monitor.output_path is left out: DeepSpeed's "" means the working directory,
    # zerotrain's run.output_dir (docs/CONFIG.md, "Deviations").
    "tensorboard.enabled": lambda c: c.monitor_config.tensorboard.enabled,
    "tensorboard.job_name": lambda c: c.monitor_config.tensorboard.job_name,
    "csv_monitor.enabled": lambda c: c.monitor_config.csv_monitor.enabled,
    "csv_monitor.job_name": lambda c: c.monitor_config.csv_monitor.job_name,
    "comms_logger.enabled": lambda c: c.comms_config.comms_logger.enabled,
    "comms_logger.prof_all": lambda c: c.comms_config.comms_logger.prof_all,
    "comms_logger.verbose": lambda c: c.comms_config.comms_logger.verbose,
    "comms_logger.debug": lambda c: c.comms_config.comms_logger.debug,
    "activation_checkpointing.partition_activations":
        lambda c: c.activation_checkpointing_config.partition_activations,
    "activation_checkpointing.cpu_checkpointing":
        lambda c: c.activation_checkpointing_config.cpu_checkpointing,
    "activation_checkpointing.contiguous_memory_optimization":
        lambda c: c.activation_checkpointing_config.contiguous_memory_optimization,
    "activation_checkpointing.synchronize_checkpoint_boundary":
        lambda c: c.activation_checkpointing_config.synchronize_checkpoint_boundary,
    "activation_checkpointing.profile": lambda c: c.activation_checkpointing_config.profile,
    "aio.block_size": lambda c: c.aio_config["block_size"],
    "aio.queue_depth": lambda c: c.aio_config["queue_depth"],
    "aio.intra_op_parallelism": lambda c: c.aio_config["intra_op_parallelism"],
    "aio.single_submit": lambda c: c.aio_config["single_submit"],
    "aio.overlap_events": lambda c: c.aio_config["overlap_events"],
    "checkpoint.tag_validation": lambda c: c.checkpoint_config["tag_validation"],
    "checkpoint.load_universal": lambda c: c.load_universal_checkpoint,
    "checkpoint.use_node_local_storage": lambda c: c.use_node_local_storage,
    "checkpoint.parallel_write.pipeline_stage": lambda c: c.checkpoint_parallel_write_pipeline,
}


class _Recorder(dict):
    """A dict that notes each key DeepSpeed looks up in it (get, [], in, in .keys()) and the
    first default passed to get(): what DeepSpeed reads from a section it holds as a dict."""

    def __init__(self, log, path, items=()):
        super().__init__(items)
        self._log, self._path = log, path

    def _note(self, key, default=None, has_default=False):
        if isinstance(key, str):
            seen = self._log.setdefault(self._path, {})
            if key not in seen or (has_default and not seen[key][1]):
                seen[key] = (default, has_default)

    def get(self, key, default=None):
        self._note(key, default, True)
        return super().get(key, default)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

    def keys(self):
        outer = self

        class Keys:

            def __contains__(self, key):
                outer._note(key)
                return dict.__contains__(outer, key)

            def __iter__(self):
                return iter(dict.keys(outer))

            def __len__(self):
                return dict.__len__(outer)

        return Keys()


# The sections DeepSpeed reads as plain dicts (besides the top level), nested ones after their
# parents; each is given to DeepSpeedConfig empty, so every key it looks up takes its default.
DICT_SECTIONS = ["activation_checkpointing", "aio", "checkpoint", "checkpoint.writer",
                 "checkpoint.parallel_write", "flops_profiler", "torch_autocast", "data_types",
                 "optimizer"]

# What a dict section holds while DeepSpeedConfig reads it: an optimizer type, without which it
# does not look for params.
DICT_SECTION_SEEDS = {"optimizer": {"type": "Adam"}}

# The sections DeepSpeed holds as pydantic models: where the resolved DeepSpeedConfig keeps each.
MODEL_SECTIONS = {
    "zero_optimization": lambda c: c.zero_config,
    "zero_optimization.offload_optimizer": lambda c: c.zero_config.offload_optimizer,
    "zero_optimization.offload_param": lambda c: c.zero_config.offload_param,
    "fp16": lambda c: c.float16_config,
    "bf16": lambda c: c.bfloat16_config,
    "tensorboard": lambda c: c.monitor_config.tensorboard,
    "csv_monitor": lambda c: c.monitor_config.csv_monitor,
    "wandb": lambda c: c.monitor_config.wandb,
    "comet": lambda c: c.monitor_config.comet,
    "comms_logger": lambda c: c.comms_config.comms_logger,
}


def _json_default(value):
    """A default as JSON: enums by value, models as dicts, anything else JSON cannot hold as text."""
    import enum
    if isinstance(value, enum.Enum):
        value = value.value
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    try:
        return json.loads(json.dumps(value))
    except TypeError:
        return str(value)


def section_fields():
    init_single_process()
    import deepspeed.runtime.config as ds_config
    log = {}
    root = _Recorder(log, "", {"train_micro_batch_size_per_gpu": 1})
    # Every model section present, so that DeepSpeedConfig builds each model (comms_logger and
    # the offload sections exist only when given).
    root.update({"comms_logger": {}, "zero_optimization": {
        "offload_optimizer": {"device": "none"}, "offload_param": {"device": "none"}}})
    for path in DICT_SECTIONS:
        *parents, name = path.split(".")
        parent = root
        for p in parents:
            parent = dict.__getitem__(parent, p)
        dict.__setitem__(parent, name, _Recorder(log, path, DICT_SECTION_SEEDS.get(path, {})))
    config = ds_config.DeepSpeedConfig(root)
    removed = {"": ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS,
               "zero_optimization": ds_config._REMOVED_ZERO_CONFIG_KEYS}
    out = {}
    for path in [""] + DICT_SECTIONS:
        gone = removed.get(path, {})
        out[path] = {"strict": False, "removed": sorted(gone), "fields": {
            key: {"alias": "", "default": _json_default(default), "has_default": has_default}
            for key, (default, has_default) in sorted(log.get(path, {}).items())
            if key not in gone}}
    for path, read in MODEL_SECTIONS.items():
        model = type(read(config))
        fields = {}
        for name, field in model.model_fields.items():
            fields[name] = {"alias": field.alias or "", "has_default": True,
                            "default": _json_default(field.get_default(call_default_factory=True))}
        out[path] = {"strict": model.model_config.get("extra") == "forbid",
                     "removed": sorted(removed.get(path, {})), "fields": fields}
    return out


def resolved_defaults(directory):
    init_single_process()
    from deepspeed.runtime.config import DeepSpeedConfig
    out = {}
    for name, raw in cases(directory):
        config = DeepSpeedConfig(raw)
        values = {}
        for field, read in DEFAULTS.items():
            try:
                values[field] = read(config)
            except AttributeError:  # a section the case does not have (offload, comms_logger)
                continue
        out[name] = values
    return out


# The optimizer paths zerotrain accepts: a ds_config's optimizer (and zero) sections, each leading
# DeepSpeed's _configure_basic_optimizer to one class (the C++ test loads the same sections).
_OFFLOAD = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
OPTIMIZER_PATHS = {
    "adam": {"optimizer": {"type": "Adam"}},
    "adam_l2": {"optimizer": {"type": "Adam", "params": {"adam_w_mode": False}}},
    "adamw": {"optimizer": {"type": "AdamW"}},
    "adam_torch": {"optimizer": {"type": "Adam", "params": {"torch_adam": True}}},
    "adam_l2_torch": {"optimizer": {"type": "Adam",
                                    "params": {"torch_adam": True, "adam_w_mode": False}}},
    "adamw_torch": {"optimizer": {"type": "AdamW", "params": {"torch_adam": True}}},
    "adam_offload": {"optimizer": {"type": "Adam"}, "zero_optimization": _OFFLOAD},
    "sgd": {"optimizer": {"type": "SGD"}},
    "adagrad": {"optimizer": {"type": "Adagrad"}},
    "adagrad_offload": {"optimizer": {"type": "Adagrad"}, "zero_optimization": _OFFLOAD},
    "lamb": {"optimizer": {"type": "Lamb"}},
}


class _Stop(Exception):
    """Raised by a stand-in constructor once it has seen what DeepSpeed passes."""


class _Flag:
    """A user's params value that is seen through: truthy as `value`, recognisable by identity."""

    def __init__(self, value):
        self.value = value

    def __bool__(self):
        return bool(self.value)


def _verdict(e):
    return "error: " + type(e).__name__ + ": " + (str(e).strip().splitlines() or [""])[0]


def _plain(value):
    if isinstance(value, _Flag):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    return _json_default(value)


def optimizer_params():
    deepspeed = init_single_process()
    import inspect
    import torch
    import deepspeed.ops.adagrad as ds_adagrad
    import deepspeed.ops.adam as ds_adam
    import deepspeed.ops.lamb as ds_lamb
    from deepspeed.runtime.engine import DeepSpeedEngine
    # Where _configure_basic_optimizer finds each class at call time.
    homes = [(torch.optim, "Adam"), (torch.optim, "AdamW"), (torch.optim, "SGD"),
             (torch.optim, "Adagrad"), (ds_adam, "FusedAdam"), (ds_adam, "DeepSpeedCPUAdam"),
             (ds_adagrad, "DeepSpeedCPUAdagrad"), (ds_lamb, "FusedLamb")]
    real = {(m, n): getattr(m, n) for m, n in homes}

    def signature(cls):
        return {name: _json_default(p.default) for name, p in
                list(inspect.signature(cls.__init__).parameters.items())[2:]}  # self, params

    # Every keyword any of them takes, and the keys the engine reads itself; max_grad_norm is
    # refused before any constructor runs.
    universe = sorted((set().union(*(signature(c) for c in real.values())) |
                       {"torch_adam", "adam_w_mode", "fp32_optimizer_states"}) - {"max_grad_norm"})
    seen = {}

    def stand_in(module, name, construct):
        cls = real[(module, name)]

        def make(params, *args, **kwargs):
            seen["class"] = f"{module.__name__}.{name}"
            seen["kwargs"] = kwargs
            seen["signature"] = signature(cls)
            if construct and module is torch.optim:
                optimizer = cls(params, *args, **kwargs)
                seen["group"] = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
                return optimizer
            if construct:  # Python's TypeError, without building the op
                inspect.signature(cls).bind(params, *args, **kwargs)
            raise _Stop()

        return make

    def run(config, construct, params=None):
        """deepspeed.initialize() on `config`; `params` replaces what the engine reads as
        optimizer.params. The verdict: "ok", or the error (a stand-in's stop is "ok")."""
        seen.clear()
        for module, name in homes:
            setattr(module, name, stand_in(module, name, construct))
        original = DeepSpeedEngine.optimizer_params
        if params is not None:
            DeepSpeedEngine.optimizer_params = lambda self: dict(params)
        try:
            model = torch.nn.Linear(2, 1)
            deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                 config=json.loads(json.dumps(config)))
            return "ok"
        except _Stop:
            return "ok"
        except Exception as e:  # TypeError, ValueError, ...
            return _verdict(e)
        finally:
            DeepSpeedEngine.optimizer_params = original
            for (module, name), cls in real.items():
                setattr(module, name, cls)

    out = {}
    for path, sections in OPTIMIZER_PATHS.items():
        config = dict(sections, train_micro_batch_size_per_gpu=1)
        given = config["optimizer"].get("params", {})
        # Every keyword at once, each a distinct object: one that reaches the constructor as it
        # was given is passed through; one that does not, the engine read itself. The two keys
        # that choose the path keep their truth value.
        probe = {key: _Flag(given.get(key, key == "adam_w_mode")) if key in
                 ("torch_adam", "adam_w_mode") else _Flag(key) for key in universe}
        verdict = run(config, False, probe)
        # A keyword the engine passes itself cannot be given too (Python's TypeError).
        while "multiple values for keyword argument" in verdict:
            del probe[verdict.split("'")[-2]]
            verdict = run(config, False, probe)
        if verdict != "ok" or "class" not in seen:
            raise RuntimeError(f"{path}: the probe did not reach a constructor: {verdict}")
        kwargs, sig = seen["kwargs"], seen["signature"]
        passed = {k for k, v in kwargs.items() if v is probe.get(k)}
        read = {k for k in probe if k not in passed}
        engine_kwargs = {k: _plain(v) for k, v in kwargs.items()
                         if not any(v is f for f in probe.values())}
        info = {"config": config, "class": seen["class"], "signature": sig,
                "engine_kwargs": engine_kwargs, "read": sorted(read),
                "accepted": sorted((passed & set(sig)) | read)}
        verdict = run(config, True)
        if verdict != "ok":
            raise RuntimeError(f"{path}: {verdict}")
        if "group" in seen:
            info["defaults"] = {k: _plain(v) for k, v in seen["group"].items()}
            info["constructed"] = True
        else:
            info["defaults"] = dict(sig, **{k: _plain(v) for k, v in seen["kwargs"].items()})
            info["constructed"] = False
        for case, extra in (("typo", {"weight_decy": 0.0}), ("max_grad_norm", {"max_grad_norm": 1.0})):
            wrong = json.loads(json.dumps(config))
            wrong["optimizer"].setdefault("params", {}).update(extra)
            info[case] = {"params": extra, "verdict": run(wrong, True)}
        out[path] = info

    # The defaults of the keys the engine pops from params before constructing: the literal or
    # constant after the key in each optimizer_parameters.pop(key, default) it runs.
    import ast
    import textwrap
    import deepspeed.runtime.engine as engine_module
    pops = {}
    for method in (DeepSpeedEngine._configure_basic_optimizer,
                   DeepSpeedEngine.get_optimizer_configuration):
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(method)))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and
                    node.func.attr == "pop" and len(node.args) == 2):
                key, default = (eval(compile(ast.Expression(a), "engine.py", "eval"),
                                     vars(engine_module)) for a in node.args)
                pops.setdefault(key, default)

    # The optimizer section's own keys, as DeepSpeedConfig looks them up.
    from deepspeed.runtime.config import DeepSpeedConfig
    log = {}
    section = _Recorder(log, "optimizer", {"type": "Adam", "params": {}})
    resolved = DeepSpeedConfig({"train_micro_batch_size_per_gpu": 1, "optimizer": section})
    return {"paths": out, "pops": pops, "section": {"keys": sorted(log.get("optimizer", {})),
                                      "legacy_fusion": resolved.optimizer_legacy_fusion}}


def main(argv):
    # Only the JSON goes to stdout: DeepSpeed and the op builds it runs print there too.
    result_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if len(argv) < 2:
        sys.exit("usage: ds_oracle.py lr <dir> <steps> | scaler <dir> | accepts <dir> | defaults <dir> "
                 "| fields | optimizer")
    if argv[1] == "lr":
        result = lr_sequences(argv[2], int(argv[3]))
    elif argv[1] == "scaler":
        result = scaler_sequences(argv[2])
    elif argv[1] == "accepts":
        result = accepts(argv[2])
    elif argv[1] == "defaults":
        result = resolved_defaults(argv[2])
    elif argv[1] == "fields":
        result = section_fields()
    elif argv[1] == "optimizer":
        result = optimizer_params()
    else:
        sys.exit(f"ds_oracle.py: unknown subcommand {argv[1]!r}")
    json.dump(result, result_out)
    result_out.close()


if __name__ == "__main__":
    main(sys.argv)
