#!/usr/bin/env python3
"""The GPU benchmark's peer (tools/gpu_bench.sh): the same GPT-2 as //trainer:main's `gpt2` model
(tied embeddings, learned positions, pre-LayerNorm blocks, tanh GELU, SDPA causal attention),
trained by PyTorch itself on this machine's torch, eager, bf16: DDP for ZeRO stage 0, FSDP2
`fully_shard` for the sharded stages (reshard_after_forward False for stages 1/2, True for 3,
CPUOffloadPolicy for the offload rows). Prints one JSON line: tokens/s per GPU over the timed steps
and the caching allocator's peak allocated bytes on this rank. Run it under torch.distributed.run.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, block, layers, heads, d):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if "ln_" in name:
                continue
            if p.dim() == 1:
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1), device=tokens.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "fsdp2_zero2", "fsdp2_zero3"], required=True)
    ap.add_argument("--cpu_offload", action="store_true")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--embd", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--micro_batch", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    # A smoke test of this script where no GPU is (gloo, fp32 on the host; no figures).
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()

    dist.init_process_group("gloo" if a.cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.cpu:
        device = torch.device("cpu")
        cuda = None
    else:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        cuda = torch.cuda
    torch.manual_seed(1)
    model = Gpt(a.vocab, a.seq, a.layers, a.heads, a.embd)
    if a.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(
            model.to(device), device_ids=None if a.cpu else [device.index])
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=not a.cpu)
    else:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        kw = dict(
            mp_policy=MixedPrecisionPolicy(
                param_dtype=None if a.cpu else torch.bfloat16,
                reduce_dtype=None if a.cpu else torch.bfloat16),
            reshard_after_forward=a.mode == "fsdp2_zero3",
        )
        if a.cpu_offload:
            kw["offload_policy"] = CPUOffloadPolicy(pin_memory=not a.cpu)
        else:
            model = model.to(device)
        for block in model.h:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        autocast = torch.autocast(device.type, enabled=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0,
                            fused=not (a.cpu_offload or a.cpu))
    gen = torch.Generator(device="cpu").manual_seed(rank)
    tokens = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), generator=gen).to(device)
    x, y = tokens[:, :-1], tokens[:, 1:]
    sync = (lambda: cuda.synchronize(device)) if cuda else (lambda: None)
    if cuda:
        cuda.reset_peak_memory_stats(device)
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            sync()
            start = time.perf_counter()
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
    seconds = time.perf_counter() - start
    out = {
        "tokens_per_s_per_gpu": a.micro_batch * a.seq * a.steps / seconds,
        "peak_allocated_bytes": cuda.max_memory_allocated(device) if cuda else 0,
        "loss": loss.item(),
        "world": world,
    }
    if rank == 0:
        print("PEER " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
