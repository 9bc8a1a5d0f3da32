"""zero.Init's promise measured in the process, not in an account: on every rank of torchrun, a
model of LAYERS Linear(WIDTH, WIDTH) layers built inside zero.Init raises the rank's peak resident
memory (VmHWM, reset before the build through /proc/self/clear_refs) by about 1/world of the
model's bytes: at most its share plus one whole layer (the one being built) and SLACK_MIB of
allocator and interpreter overhead, at least 90% of its share (the parts are held). Then
initialize adopts the parts, and one step trains. Prints "zero_init_memory: OK" on rank 0.
"""
import os

import torch

import zerotrain as deepspeed

LAYERS, WIDTH, SLACK_MIB = 32, 1024, 24
MIB = 1 << 20


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def main():
    config = {"train_micro_batch_size_per_gpu": 2,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    group = deepspeed.init_distributed()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before = status_bytes("VmHWM")
    torch.manual_seed(3)
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    peak = status_bytes("VmHWM") - before
    held = status_bytes("VmRSS") - before
    layer = (WIDTH * WIDTH + WIDTH) * 4
    share = LAYERS * layer / world
    print(f"zero_init_memory: rank {rank}: model {LAYERS * layer / MIB:.1f} MiB, world {world}: "
          f"peak +{peak / MIB:.1f} MiB, held +{held / MIB:.1f} MiB "
          f"({peak / (LAYERS * layer):.2f} of the model)", flush=True)
    assert peak <= share + layer + SLACK_MIB * MIB, f"rank {rank}: peak +{peak} B, share {share} B"
    assert held >= 0.9 * share, f"rank {rank}: holds +{held} B, less than its share {share} B"
    engine, *_ = deepspeed.initialize(model=model, config=config)
    x = torch.randn(2, WIDTH)
    loss = engine(x).square().mean()
    engine.backward(loss)
    engine.step()
    assert engine.global_steps == 1 and torch.isfinite(loss)
    if rank == 0:
        print("zero_init_memory: OK", flush=True)


if __name__ == "__main__":
    main()
