"""DeepSpeed 0.19.8 training the trainer's GPT: the oracle of train_conformance_test.cc.

  ds_train_oracle.py <dir> <steps>

<dir> holds what the C++ test wrote from zerotrain's own code:
  model.json     the GPT's sizes (vocab_size, block_size, n_layer, n_head, n_embd)
  batches.bin    int64 header [ranks, steps, gas, micro_batch, T], then token ids
                 [rank][step][micro][x|y][micro_batch][T]: each rank's micro-batches as
                 zerotrain's DistributedSampler hands them out
  cases/<case>.json  a ds_config, exactly the file zerotrain trains with
  cases/<case>.pt    the initial weights zerotrain starts that case from (a torch.save state dict)

It starts `ranks` processes of itself on CPU over gloo; each runs deepspeed.initialize() on a
PyTorch copy of the GPT for every case in turn and trains <steps> optimizer steps. Printed on
stdout: {case: [loss of step 1, ...]}, a step's loss being the mean over micro-batches and ranks,
as zerotrain's trainer reports it.
"""
import datetime
import json
import logging
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from ds_oracle import cases, free_port, init_distributed  # this script's folder is first on sys.path


class SelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (m.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for m in self.c_attn(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Mlp(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = SelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = Mlp(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """models/gpt.h's GPT (pre-LayerNorm, exact GELU, output tied to wte), same names."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), dtype=torch.long)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def read_batches(path):
    data = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.int64)
    ranks, steps, gas, micro, t = data[:5].tolist()
    return data[5:].view(ranks, steps, gas, 2, micro, t)


def train_case(deepspeed, config, weights, sizes, batches, rank, steps):
    model = Gpt(**sizes)
    model.load_state_dict(torch.load(weights, weights_only=True))
    if config.get("zero_optimization", {}).get("stage", 0) == 3:
        # The tied output reads wte.weight outside wte's forward: stage 3 must gather it there.
        deepspeed.zero.register_external_parameter(model, model.wte.weight)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    gas = engine.gradient_accumulation_steps()
    losses = []
    for step in range(steps):
        total = 0.0
        for micro in range(gas):
            x, y = batches[rank, step, micro]
            logits = engine(x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
            engine.backward(loss)
            engine.step()
            total += loss.item()
        mean = torch.tensor([total / gas], dtype=torch.float64)
        torch.distributed.all_reduce(mean)
        losses.append(mean.item() / torch.distributed.get_world_size())
    engine.destroy()
    return losses


def worker(directory, steps):
    # DeepSpeed prints to stdout; the parent reads only the result file.
    sys.stdout = sys.stderr
    # DeepSpeed wraps Muon's update and Newton-Schulz iterations in torch.compile: the oracle runs
    # them eagerly, op by op as written (inductor would fuse the fp16 element-wise ops, and spend
    # minutes compiling on a CPU).
    import torch._dynamo
    torch._dynamo.config.disable = True
    import deepspeed
    from deepspeed.utils import logger
    logger.setLevel(logging.ERROR)
    init_distributed(deepspeed, timeout=datetime.timedelta(seconds=120))
    rank = torch.distributed.get_rank()
    torch.manual_seed(0)
    with open(os.path.join(directory, "model.json")) as f:
        sizes = json.load(f)
    batches = read_batches(os.path.join(directory, "batches.bin"))
    out = {}
    cases_dir = os.path.join(directory, "cases")
    for name, config in cases(cases_dir):
        out[name] = train_case(deepspeed, config, os.path.join(cases_dir, name + ".pt"), sizes,
                               batches, rank, steps)
    if rank == 0:
        with open(os.path.join(directory, "losses.json"), "w") as f:
            json.dump(out, f)
    # Gloo's threads stopped before the interpreter exits (an exit with them running can abort).
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    # Then leave without the interpreter's teardown, which still aborted once in a cold CI run
    # ("terminate called without an active exception", exit -6) after losses.json was written,
    # on a C++ thread left joinable at exit: nothing is left to do that needs it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launch(directory, steps):
    ranks = read_batches(os.path.join(directory, "batches.bin")).size(0)
    port = str(free_port())
    children = []
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks),
                   LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", directory, str(steps)], env=env))
    # A failed rank leaves the others in a collective: stop them rather than wait out gloo's
    # timeout. The caller's deadline (RunOracle) bounds the whole run.
    failed = None
    while failed is None and any(child.poll() is None for child in children):
        failed = next((c.returncode for c in children if c.returncode not in (None, 0)), None)
        time.sleep(0.05)
    failed = failed or next((c.returncode for c in children if c.returncode != 0), None)
    if failed is not None:
        for child in children:
            child.kill()
        sys.exit(f"ds_train_oracle.py: a DeepSpeed rank failed ({failed}); see its stderr above")
    with open(os.path.join(directory, "losses.json")) as f:
        sys.stdout.write(f.read())


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 3:
        launch(sys.argv[1], int(sys.argv[2]))
    else:
        sys.exit("usage: ds_train_oracle.py <dir> <steps>")
