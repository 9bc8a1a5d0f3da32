"""Ctrl-C during training: `train` saves a checkpoint after every step until interrupted (the
SIGINT arrives while the C++ engine works, with the GIL released; Python raises KeyboardInterrupt
when the call returns); `resume` then loads the newest checkpoint, checks its client_state and
trains on. One process, no launcher.

Usage: interrupt.py train|resume DIR
"""
import signal
import sys

import torch

import zerotrain as deepspeed

CONFIG = {"train_batch_size": 8, "zero_optimization": {"stage": 2},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}


def make():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 4))
    engine, _, _, _ = deepspeed.initialize(model=model, config=CONFIG)
    return engine


def step(engine, n):
    g = torch.Generator().manual_seed(n)
    x, y = torch.randn(8, 64, generator=g), torch.randn(8, 4, generator=g)
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.step()


def main(mode, ckpt):
    # A shell starts a background job with SIGINT ignored, and Python then keeps it so; a
    # terminal's Ctrl-C reaches a script with Python's own handler, which this restores.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    engine = make()
    if mode == "train":
        n = 0
        while True:
            step(engine, n)
            n += 1
            engine.save_checkpoint(ckpt, client_state={"step": n})
            print(f"saved {n}", flush=True)
    path, client = engine.load_checkpoint(ckpt)
    n = client["step"]
    assert engine.global_steps == n, (engine.global_steps, n)
    for k in range(n, n + 2):
        step(engine, k)
    print(f"resumed at {n} from {path}, trained to {engine.global_steps}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
