"""A checkpoint that train_parity.py saved on 2 ranks (GPT-2 at stage 3), loaded by one process
at stage 0: the loss on train_parity's fixed probe batch must be the one the 2-rank run saw when
it saved (1e-6 relative), and training goes on from it. Prints "reload_one_rank: OK".

Usage: reload_one_rank.py CHECKPOINT_DIR
"""
import json
import os
import sys

import train_parity
import zerotrain as deepspeed


def main(ckpt):
    train_parity.deepspeed = deepspeed
    model = train_parity.make_model("gpt2")
    engine, _, _, _ = deepspeed.initialize(model=model, config=train_parity.config(0))
    assert engine.world_size == 1 and engine.zero_optimization_stage() == 0
    path, client = engine.load_checkpoint(ckpt)
    assert client == {"epoch": 3, "seen": [1, 2]}, client
    got = train_parity.probe_loss("gpt2", engine)
    with open(os.path.join(ckpt, "probe.json")) as f:
        want = json.load(f)["loss"]
    assert abs(got - want) <= 1e-6 * abs(want), f"probe loss {got}, the 2-rank run saw {want}"
    x, y = train_parity.global_batch("gpt2", 0, train_parity.MICRO)
    engine.backward(train_parity.loss_of("gpt2", engine, x, y))
    engine.step()
    print(f"reload_one_rank: OK: probe loss {got} (saved on 2 ranks at stage 3: {want}), "
          f"loaded from {path}")


if __name__ == "__main__":
    main(sys.argv[1])
