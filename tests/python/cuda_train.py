"""The Python front end on a GPU: tools/gpu_check.sh's python_cuda check (unverified until a GPU
machine runs it; docs/PYTHON.md). One process, one rank over NCCL: a torch.nn model moved to
cuda:0 trains through `import zerotrain as deepspeed` at stages 0, 2 and 3 in fp32, and its
parameters after STEPS steps must be those of a plain torch.optim.AdamW loop on the same GPU
(1e-4 + 1e-4 * |w|: cuBLAS may order its sums differently); at stage 2 in bf16 the parameters are
bf16 on the GPU and the losses within 2% of the fp32 loop's. The GPU machine has torch but not
transformers, so the model is torch's own layers.

Exit status: 0 passed, 1 failed, 77 no CUDA device (the staged package still imported).
Usage: PYTHONPATH=.gpu/python python3 cuda_train.py
"""
import sys

import torch

STEPS, BATCH, CLIP = 10, 16, 1.0


def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
                               torch.nn.GELU(), torch.nn.Linear(128, 8)).cuda()


def batch(step):
    g = torch.Generator().manual_seed(50 + step)
    return torch.randn(BATCH, 64, generator=g).cuda(), torch.randn(BATCH, 8, generator=g).cuda()


def reference():
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    return {n: p.detach().float() for n, p in model.named_parameters()}, losses


def train(deepspeed, stage, bf16):
    model = make_model()
    config = {"train_micro_batch_size_per_gpu": BATCH, "gradient_clipping": CLIP,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
              "bf16": {"enabled": bf16},
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    engine, *_ = deepspeed.initialize(model=model, config=config)
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        dtype = torch.bfloat16 if bf16 else torch.float32
        loss = torch.nn.functional.mse_loss(engine(x.to(dtype)).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return params, losses


def main():
    if sys.version_info[:2] != (3, 11):
        print(f"FAIL: this python3 is {sys.version.split()[0]}; zerotrain's extension is built "
              "for CPython 3.11")
        return 1
    import zerotrain as deepspeed
    print(f"zerotrain {deepspeed.__version__} on torch {torch.__version__}", flush=True)
    if not torch.cuda.is_available():
        print("skipped: no CUDA device (the staged package imported)")
        return 77
    deepspeed.init_distributed(dist_backend="nccl")
    want, want_losses = reference()
    failed = 0
    for stage, bf16 in [(0, False), (2, False), (3, False), (2, True)]:
        name = f"stage {stage} {'bf16' if bf16 else 'fp32'}"
        got, losses = train(deepspeed, stage, bf16)
        problems = []
        for n, w in want.items():
            g = got[n]
            if g.device.type != "cuda":
                problems.append(f"{n} is on {g.device}")
            elif bf16 and g.dtype != torch.bfloat16:
                problems.append(f"{n} is {g.dtype}, not bf16")
            elif not bf16 and not torch.allclose(g, w, rtol=1e-4, atol=1e-4):
                problems.append(f"{n} differs from torch AdamW by {(g - w).abs().max().item():.2e}")
        if bf16:
            worst = max(abs(a - b) / abs(b) for a, b in zip(losses, want_losses))
            if worst > 0.02:
                problems.append(f"losses differ from fp32's by up to {worst:.1%}")
        print(f"{'FAIL' if problems else 'ok'}: {name}: losses {losses[0]:.4f} -> {losses[-1]:.4f}"
              + (": " + "; ".join(problems) if problems else ""), flush=True)
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
