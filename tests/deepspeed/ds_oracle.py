"""DeepSpeed 0.19.8 as the conformance tests' oracle: what DeepSpeed itself does with a ds_config.

Run by tests/deepspeed/*_test.cc through RunOracle (oracle.h) with the project venv's python.
Each subcommand reads inputs the C++ test wrote and prints one JSON object on stdout:

  lr <dir> <steps>   for every <dir>/*.json: the lr and Adam betas in the optimizer's param
                     group at each of <steps> optimizer steps of a real deepspeed.initialize()
                     engine (one process, gloo), i.e. what each step ran with.
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
    deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed


def lr_sequences(directory, steps):
    deepspeed = init_single_process()
    import torch
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            config = json.load(f)
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
        out[os.path.basename(path)[:-len(".json")]] = seq
    return out


def scaler_sequences(directory):
    init_single_process()
    import torch
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            config = json.load(f)
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
        out[os.path.basename(path)[:-len(".json")]] = {"scales": scales, "hysteresis": hysteresis,
                                                       "raised": raised}
    return out


def zero_fields():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    out = {}
    for name, field in DeepSpeedZeroConfig.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if hasattr(default, "model_dump"):
            default = default.model_dump()
        extra = field.json_schema_extra or {}
        out[name] = {"alias": field.alias or "", "default": default,
                     "deprecated": bool(extra.get("deprecated", False))}
    return out


def accepts(directory):
    init_single_process()
    from deepspeed.runtime.config import DeepSpeedConfig
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            config = json.load(f)
        try:
            DeepSpeedConfig(config)
            verdict = "ok"
        except Exception as e:  # pydantic's ValidationError, ValueError, ...
            verdict = "error: " + (str(e).strip().splitlines() or [type(e).__name__])[0]
        out[os.path.basename(path)[:-len(".json")]] = verdict
    return out


def main(argv):
    # Only the JSON goes to stdout: DeepSpeed and the op builds it runs print there too.
    result_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if len(argv) < 2:
        sys.exit("usage: ds_oracle.py lr <dir> <steps> | scaler <dir> | zero_fields | accepts <dir>")
    if argv[1] == "lr":
        result = lr_sequences(argv[2], int(argv[3]))
    elif argv[1] == "scaler":
        result = scaler_sequences(argv[2])
    elif argv[1] == "zero_fields":
        result = zero_fields()
    elif argv[1] == "accepts":
        result = accepts(argv[2])
    else:
        sys.exit(f"ds_oracle.py: unknown subcommand {argv[1]!r}")
    json.dump(result, result_out)
    result_out.close()


if __name__ == "__main__":
    main(sys.argv)
