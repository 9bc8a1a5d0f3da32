"""One timed run of the Python front end's benchmark (python_bench.sh drives it): a Hugging Face
GPT2LMHeadModel in the shape of //trainer:main's default GPT (vocabulary 256, 128 positions,
4 layers, 6 heads, width 384, no dropout), micro-batch 8, on every rank of torchrun, through
zerotrain or (--engine deepspeed) DeepSpeed 0.19.8 with the same ds_config: WARMUP steps, then
STEPS timed. Rank 0 appends one JSON line to --out: samples/s over all ranks, ms per step and,
for zerotrain, the binding's own ms per step (Python's wall time of engine.backward() and
engine.step() less the C++ engine's time inside them).

Usage: python_bench.py --engine zerotrain|deepspeed --stage N --precision fp32|bf16 --out FILE
"""
import argparse
import json
import os
import time

import torch
import transformers

import engines

MICRO, SEQ = 8, 128


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    args, deepspeed = engines.start(ap)
    config = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1,
              "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
              "bf16": {"enabled": args.precision == "bf16"},
              "zero_optimization": {"stage": args.stage}}
    torch.manual_seed(1)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=256, n_positions=SEQ, n_embd=384, n_layer=4, n_head=6, resid_pdrop=0,
        embd_pdrop=0, attn_pdrop=0))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                      config=config)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    g = torch.Generator().manual_seed(100 + rank)
    batches = [torch.randint(0, 256, (MICRO, SEQ), generator=g) for _ in range(4)]
    inner = getattr(engine, "_engine", None)  # zerotrain's C++ engine, for its own time
    binding = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
            engine_before = inner.engine_seconds if inner is not None else 0.0
            binding = 0.0
        ids = batches[step % len(batches)]
        loss = engine(input_ids=ids, labels=ids).loss
        t0 = time.perf_counter()
        engine.backward(loss)
        engine.step()
        binding += time.perf_counter() - t0
        loss.item()
    elapsed = time.perf_counter() - start
    result = {"engine": args.engine, "stage": args.stage, "precision": args.precision,
              "samples_per_s": args.steps * MICRO * world / elapsed,
              "ms_per_step": 1e3 * elapsed / args.steps}
    if inner is not None:
        inside = inner.engine_seconds - engine_before
        result["binding_ms_per_step"] = 1e3 * (binding - inside) / args.steps
    if rank == 0:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
        print(json.dumps(result), flush=True)
    engines.close(args.engine)


if __name__ == "__main__":
    main()
