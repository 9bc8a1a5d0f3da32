"""What zerotrain does not support, or cannot accept, is one Python exception naming it: a bad
config value (ValueError whose message is the line //trainer:main prints for the same file after
"zerotrain: error: ", so a script and the trainer say the same thing), a client optimizer with no
zerotrain equivalent or given twice, a model_parameters subset, zero.Init without a stage 3
config; and training_data's DataLoader. One process, no launcher. Prints "bad_input: OK".

Usage: bad_input.py <//trainer:main> <scratch dir>
"""
import json
import os
import subprocess
import sys

import torch

import zerotrain as deepspeed


def expect(kind, text, fn):
    try:
        fn()
    except kind as e:
        assert text in str(e), f"{kind.__name__} without {text!r}: {e}"
        return
    raise AssertionError(f"no {kind.__name__} ({text})")


BAD_CONFIGS = {
    "stage": {"zero_optimization": {"stage": 7}},
    "both_precisions": {"fp16": {"enabled": True}, "bf16": {"enabled": True}},
    "type": {"train_batch_size": "two"},
    "batch": {"train_batch_size": 3, "train_micro_batch_size_per_gpu": 2},
    "auto": {"zero_optimization": {"stage": "auto"}},
    "optimizer": {"optimizer": {"type": "Lion2"}},
    "offload": {"zero_optimization": {"stage": 3, "offload_param": {"device": "disk"}}},
    "not_json": "{\"train_batch_size\": 2,",
}


def same_message_as_trainer(trainer, scratch, model, good):
    """Each bad ds_config file: the trainer's one error line, and initialize's ValueError saying
    the same."""
    for name, change in BAD_CONFIGS.items():
        path = os.path.join(scratch, f"bad_{name}.json")
        with open(path, "w") as f:
            f.write(change if isinstance(change, str) else json.dumps({**good, **change}))
        # One rank, as this process is (the batch check names the world size); the config is
        # refused before any rendezvous.
        env = {**os.environ, "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
        run = subprocess.run([trainer, f"--ds_config={path}"], capture_output=True, text=True,
                             timeout=120, env=env)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1, (name, run.returncode, run.stderr)
        prefix = "zerotrain: error: "
        assert lines[0].startswith(prefix), (name, lines)
        try:
            deepspeed.initialize(model=model, config=path)
        except ValueError as e:
            assert str(e) == lines[0][len(prefix):], f"{name}: {e!r} against the trainer's {lines}"
        else:
            raise AssertionError(f"{name}: initialize accepted {path}")


def main():
    trainer, scratch = sys.argv[1:3]
    model = torch.nn.Linear(4, 2)
    good = {"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    same_message_as_trainer(trainer, scratch, model, good)
    no_optimizer = {"train_batch_size": 2}
    expect(NotImplementedError, "torch.optim.rmsprop.RMSprop",
           lambda: deepspeed.initialize(model=model, config=no_optimizer,
                                        optimizer=torch.optim.RMSprop(model.parameters())))
    expect(NotImplementedError, "amsgrad=True",
           lambda: deepspeed.initialize(model=model, config=no_optimizer, optimizer=torch.optim.AdamW(
               model.parameters(), amsgrad=True)))
    expect(ValueError, "both as the optimizer argument and in <config dict>",
           lambda: deepspeed.initialize(model=model, config=good,
                                        optimizer=torch.optim.SGD(model.parameters(), lr=0.1)))
    # training_data: a DataLoader of micro-batches over a DistributedSampler, as DeepSpeed's.
    data = torch.utils.data.TensorDataset(torch.arange(10.0))
    engine, optimizer, loader, scheduler = deepspeed.initialize(
        model=model, config=no_optimizer, training_data=data,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.25, momentum=0.5))
    assert loader.batch_size == 2 and len(loader) == 5, (loader.batch_size, len(loader))
    assert isinstance(loader.sampler, torch.utils.data.distributed.DistributedSampler)
    assert scheduler is None and optimizer.param_groups[0]["lr"] == 0.25
    expect(NotImplementedError, "model_parameters",
           lambda: deepspeed.initialize(model=model, config=good,
                                        model_parameters=[model.weight]))
    expect(ValueError, "zero.Init: pass the stage 3 config", lambda: deepspeed.zero.Init())
    expect(NotImplementedError, "remote_device=",
           lambda: deepspeed.zero.Init(config_dict_or_path=good, remote_device="cpu"))
    expect(ValueError, "partitioned construction is for ZeRO stage 3",
           lambda: deepspeed.zero.Init(config_dict_or_path=good).__enter__())
    expect(ValueError, "no config", lambda: deepspeed.initialize(model=model))
    print("bad_input: OK")


if __name__ == "__main__":
    main()
