"""A PyTorch script trained through zerotrain as DeepSpeed users write one, on every rank of a
launcher (torchrun, deepspeed): for each ZeRO stage asked for, a small model's parameters after 12
steps (accumulation 2, clipping) must match a plain single-process torch.optim.AdamW loop on the
whole global batch within 1e-6 + 1e-5 * |w| (GPT-2 and Llama from transformers: 1e-5 + 1e-5 * |w|,
see main). Odd stages get
that torch.optim.AdamW object itself, even ones the config's "optimizer" section. A run saved at
step 6 and resumed in a fresh engine must give the uninterrupted run's losses bitwise and its
client_state back; the engine's counters must say what DeepSpeed's say. Stage 2 also runs the
config's csv_monitor, tensorboard and comms_logger: the CSV's per-step loss must be the
reference's, and log_summary must list the collectives its prof_ops names and no other. The MLP at stage 3 is built
under zero.Init (partitioned as it is built); at stage 3 GatheredParameters with modifier_rank 0
changes a weight every rank then sees and trains from. With --engine deepspeed the same runs on DeepSpeed
itself (no zero.Init, monitors or comms logger there); rank 0's per-micro-batch losses go to
OUT/losses_rank0.json for python_test.sh to compare. Prints
"train_parity: OK" on rank 0.

Usage: train_parity.py --stages 0,1,2,3 --out DIR [--model mlp,gpt2,llama] [--engine zerotrain|deepspeed]
"""
import argparse
import csv
import json
import os

import torch

import engines

deepspeed = None  # zerotrain, or with --engine deepspeed DeepSpeed itself (main imports it)

STEPS, SAVE_AT, GAS, MICRO = 12, 6, 2, 4
LR, WD, CLIP = 1e-3, 0.01, 0.5


def make_model(kind):
    torch.manual_seed(7)
    if kind == "gpt2":
        import transformers
        cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2,
                                      n_head=2, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
        return transformers.GPT2LMHeadModel(cfg)
    if kind == "llama":
        import transformers
        cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=2,
                                       num_key_value_heads=1, max_position_embeddings=16)
        return transformers.LlamaForCausalLM(cfg)
    return torch.nn.Sequential(torch.nn.Linear(10, 24), torch.nn.Tanh(), torch.nn.Linear(24, 24),
                               torch.nn.Tanh(), torch.nn.Linear(24, 5))


def global_batch(kind, step, size):
    g = torch.Generator().manual_seed(1000 + step)
    if kind != "mlp":
        ids = torch.randint(0, 64, (size, 16), generator=g)
        return ids, ids
    return torch.randn(size, 10, generator=g), torch.randn(size, 5, generator=g)


def loss_of(kind, model, x, y):
    if kind != "mlp":
        return model(input_ids=x, labels=y).loss
    return torch.nn.functional.mse_loss(model(x), y)


def reference(kind, world):
    """The parameters after STEPS steps, and each step's loss (its micro-batches' mean)."""
    model = make_model(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    step_losses = []
    for step in range(STEPS):
        x, y = global_batch(kind, step, world * MICRO * GAS)
        opt.zero_grad()
        total = 0.0
        for m in range(GAS):  # each micro-batch's mean loss over the ranks, averaged over GAS
            for r in range(world):
                lo = (m * world + r) * MICRO
                loss = loss_of(kind, model, x[lo:lo + MICRO], y[lo:lo + MICRO]) / (world * GAS)
                loss.backward()
                total += loss.item()
        step_losses.append(total)
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}, step_losses


def check_monitors(out, want_losses):
    """Stage 2 ran with csv_monitor, tensorboard and comms_logger on: one CSV row per step whose
    loss is the reference's, a TensorBoard event file, and the collectives' summary."""
    with open(os.path.join(out, "csv", "parity", "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(1, STEPS + 1)), [r["step"] for r in rows]
    for r, want in zip(rows, want_losses):
        got = float(r["loss"])
        assert abs(got - want) <= 1e-4 * abs(want), (r["step"], got, want)
        assert float(r["lr"]) == LR and float(r["grad_norm"]) > 0, r
    events = os.listdir(os.path.join(out, "tb", "parity"))
    assert any(e.startswith("events.out.tfevents.") for e in events), events


def probe_loss(kind, engine):
    """The loss on a fixed batch, forward only: the same on any world size and stage for the same
    parameters."""
    x, y = global_batch(kind, 999, MICRO)
    with torch.no_grad():
        return loss_of(kind, engine, x, y).item()


def config(stage, out=None):
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GAS,
         "gradient_clipping": CLIP,
         # torch_adam: DeepSpeed steps torch's AdamW, not the ops it would compile in every
         # new venv (fused_adam, cpu_adam: ~100 CPU-s); zerotrain's own kernel either way.
         "optimizer": {"type": "AdamW",
                       "params": {"lr": LR, "weight_decay": WD, "torch_adam": True}},
         "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if out is not None:
        c["csv_monitor"] = {"enabled": True, "output_path": os.path.join(out, "csv"),
                            "job_name": "parity"}
        c["tensorboard"] = {"enabled": True, "output_path": os.path.join(out, "tb"),
                            "job_name": "parity"}
        # Rank 0 prints a line per all-reduce and all-gather (python_test.sh counts them), and the
        # summary lists those two alone (Create's broadcasts are left out).
        c["comms_logger"] = {"enabled": True, "verbose": True, "prof_all": False,
                             "prof_ops": ["all_reduce", "all_gather"]}
    return c


def train(kind, stage, first, last, ckpt=None, resume=False, monitors=None):
    if stage == 3 and kind == "mlp" and deepspeed.__name__ == "zerotrain":
        # Partitioned as it is built: no rank holds a whole layer once its __init__ returns.
        with deepspeed.zero.Init(config_dict_or_path=config(stage)):
            model = make_model(kind)
        assert all(p.numel() == 0 for p in model.parameters()), "zero.Init left a whole tensor"
    else:
        model = make_model(kind)
    if stage % 2 == 1:
        # Odd stages take the optimizer as most scripts make it: a torch.optim object.
        ds_config = {k: v for k, v in config(stage).items() if k != "optimizer"}
        client = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    else:
        ds_config, client = config(stage, monitors), None
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=client,
                                                   model_parameters=model.parameters(),
                                                   config=ds_config)
    rank, world = engine.global_rank, engine.world_size
    assert engine.train_micro_batch_size_per_gpu() == MICRO
    assert engine.gradient_accumulation_steps() == GAS
    assert engine.train_batch_size() == MICRO * GAS * world
    if resume:
        path, client = engine.load_checkpoint(ckpt)
        assert path.startswith(os.path.join(ckpt, f"global_step{first}")), path
        # DeepSpeed 0.19.8 returns its own entries (ds_config, optimizer, ...) beside the client's.
        if deepspeed.__name__ == "zerotrain":
            assert client == {"epoch": 3, "seen": [1, 2]}, client
        assert client["epoch"] == 3 and client["seen"] == [1, 2], client
        assert engine.global_steps == first
    losses = []
    for step in range(first, last):
        x, y = global_batch(kind, step, world * MICRO * GAS)
        for m in range(GAS):
            lo = (m * world + rank) * MICRO
            assert engine.is_gradient_accumulation_boundary() == (m == GAS - 1)
            loss = loss_of(kind, engine, x[lo:lo + MICRO], y[lo:lo + MICRO])
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        assert engine.global_steps == step + 1
        norm = engine.get_global_grad_norm()
        # DeepSpeed reports None where no ZeRO optimizer computed one (stage 0 in fp32).
        if deepspeed.__name__ == "zerotrain" or norm is not None:
            assert norm > 0, norm
        if ckpt is not None and not resume and step + 1 == SAVE_AT:
            engine.save_checkpoint(ckpt, client_state={"epoch": 3, "seen": [1, 2]})
            # What reload_one_rank.py must see after loading this checkpoint on one rank (every
            # rank runs the forward: stage 3 gathers in it).
            probe = probe_loss(kind, engine)
            if rank == 0:
                with open(os.path.join(ckpt, "probe.json"), "w") as f:
                    json.dump({"loss": probe}, f)
    assert engine.get_lr() == [LR] and optimizer.param_groups[0]["lr"] == LR
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
    if stage == 3:
        # GatheredParameters with modifier_rank 0: rank 0's change is every rank's, and the next
        # step trains from it (its loss is compared with DeepSpeed's too).
        first = next(model.parameters())
        with deepspeed.zero.GatheredParameters([first], modifier_rank=0):
            if rank == 0:
                with torch.no_grad():
                    first.fill_(0.25)
        with deepspeed.zero.GatheredParameters([first]):
            assert bool((first == 0.25).all()), f"rank {rank} does not see rank 0's change"
        x, y = global_batch(kind, last, world * MICRO * GAS)
        for m in range(GAS):
            lo = (m * world + rank) * MICRO
            loss = loss_of(kind, engine, x[lo:lo + MICRO], y[lo:lo + MICRO])
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    return params, losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--model", default="mlp")
    global deepspeed
    # With --engine deepspeed, the oracle: the same script on DeepSpeed 0.19.8 (CPU, gloo), whose
    # per-step losses python_test.sh compares with zerotrain's.
    args, deepspeed = engines.start(ap)
    rank = int(os.environ["RANK"])
    all_losses = {}
    for kind, stage in [(k, int(s)) for k in args.model.split(",") for s in args.stages.split(",")]:
        ckpt = os.path.join(args.out, f"{kind}_stage{stage}")
        zerotrain_only = deepspeed.__name__ == "zerotrain"
        monitors = os.path.join(args.out, "monitors") if stage == 2 and zerotrain_only else None
        got, losses = train(kind, stage, 0, STEPS, ckpt, monitors=monitors)
        world = int(os.environ["WORLD_SIZE"])
        want, want_losses = reference(kind, world)
        if monitors is not None:
            summary = deepspeed.comm.log_summary()
            if rank == 0:
                check_monitors(monitors, want_losses)
                assert "all_reduce" in summary and "all_gather" in summary, summary
                assert "(prof_ops)" in summary and "broadcast" not in summary, summary
        # GPT-2's key bias gets a gradient that is zero in real arithmetic (softmax ignores a
        # shift shared by every key), so rounding noise is all AdamW sees there and it grows to
        # update size; 1e-5 is still 1% of one step's lr.
        atol = 1e-5 if kind != "mlp" else 1e-6
        for name, w in want.items():
            g = got[name]
            assert g.shape == w.shape, (name, g.shape, w.shape)
            excess = ((g - w).abs() - (atol + 1e-5 * w.abs())).max().item()
            assert excess <= 0, f"stage {stage}: {name} differs from torch AdamW by {excess}"
        _, resumed = train(kind, stage, SAVE_AT, STEPS, ckpt, resume=True)
        assert resumed == losses[SAVE_AT * GAS:], (stage, resumed, losses[SAVE_AT * GAS:])
        all_losses[f"{kind} stage {stage}"] = losses
        if rank == 0:
            print(f"train_parity: {kind} stage {stage}: matches torch AdamW, resume bitwise")
    engines.finish(args.engine, args.out, "losses_rank0.json", all_losses, "train_parity: OK")


if __name__ == "__main__":
    main()
