"""What the test scripts share: the engine they run on (zerotrain, or DeepSpeed 0.19.8 itself as
the oracle, with ds_oracle's init_distributed on PYTHONPATH) and how they hand their results to
python_test.sh."""
import argparse
import json
import os
import sys

import torch


def start(parser=None):
    """A script's arguments with those every script takes (--out DIR, --engine, and the
    --local_rank DeepSpeed's launcher adds), and the engine it names, loaded."""
    parser = parser or argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--engine", default="zerotrain", choices=["zerotrain", "deepspeed"])
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    return args, load(args.engine)


def load(name):
    """The module a script calls `deepspeed`: zerotrain, or (name "deepspeed") DeepSpeed."""
    if name == "deepspeed":
        # DeepSpeed compiles Muon's update with torch.compile: the oracle runs it eagerly, op by
        # op as written (inductor would fuse its fp16 element-wise ops, and compile for minutes).
        import torch._dynamo
        torch._dynamo.config.disable = True
        import deepspeed
        import ds_oracle
        ds_oracle.init_distributed(deepspeed)
        return deepspeed
    import zerotrain
    return zerotrain


def finish(name, out, file_name, results, banner):
    """Rank 0 writes `results` to OUT/file_name and prints the banner; then close(name)."""
    if int(os.environ["RANK"]) == 0:
        with open(os.path.join(out, file_name), "w") as f:
            json.dump(results, f)
        print(banner, flush=True)
    close(name)


def close(name):
    """The script's last call. DeepSpeed's process group goes before the interpreter, or a thread
    of torch's gloo group outlives it ("terminate called"), and then the rank leaves without the
    interpreter's teardown, which ds_train_oracle.py once saw abort even so; zerotrain's needs
    nothing."""
    if name == "deepspeed":
        torch.distributed.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
