"""The config's other paths from Python, on zerotrain and (--engine deepspeed) on DeepSpeed 0.19.8:
bf16 at stage 2, Muon at stage 2, fp16 at stages 1 and 3 (an initial scale that overflows: skipped steps and loss
scales compared exactly; zerotrain's stage 0 must equal its stage 1), CPU offload of the optimizer
and parameters at stage 3, a WarmupLR schedule at stage 1, each 8 steps of accumulation 2 on every
rank of torchrun. Rank 0 writes each case's per-micro-batch losses, lrs, loss scales and skipped
steps to OUT/paths_rank0.json, which python_test.sh compares between the two engines (1e-5
relative, bf16 1%). zerotrain alone also runs stage 3 with the optimizer and parameters on NVMe
(under OUT), whose losses must equal the no-offload run's bitwise. Then zero_init_hf.build.

Usage: config_paths.py --out DIR [--engine zerotrain|deepspeed]
"""
import os

import torch

import engines
import zero_init_hf

STEPS, GAS, MICRO = 8, 2, 4


def cases(out):
    # torch_adam: DeepSpeed steps torch's AdamW (offloaded too), not the ops it would compile in
    # every new venv (fused_adam, cpu_adam: ~100 CPU-s); zerotrain runs its own kernels either way.
    adam = {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01, "torch_adam": True}}
    base = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GAS,
            "optimizer": adam}
    nvme = {"device": "nvme", "nvme_path": os.path.join(out, "nvme")}
    return {
        "bf16_stage2": {**base, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}},
        # fp16 with a scale that overflows the first four steps' gradients: the skipped steps and
        # the backed-off scale are DeepSpeed's, then the losses. Stage 0 on zerotrain only: it
        # must equal stage 1 (DeepSpeed 0.19.8's stage 0 fp16 scales nothing: docs/PYTHON.md).
        "fp16_stage0": {**base, "fp16": {"enabled": True, "initial_scale_power": 20},
                        "zero_optimization": {"stage": 0}},
        "fp16_stage1": {**base, "fp16": {"enabled": True, "initial_scale_power": 20},
                        "zero_optimization": {"stage": 1}},
        "fp16_stage3": {**base, "fp16": {"enabled": True, "initial_scale_power": 20},
                        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}},
        "offload_stage3": {**base, "zero_optimization": {
            "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"},
            "stage3_param_persistence_threshold": 0}},
        "warmup_stage1": {**base, "zero_optimization": {"stage": 1}, "scheduler": {
            "type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                           "warmup_num_steps": 5}}},
        # Muon for both Linear weights (DeepSpeed's rule, from their names), AdamW for the biases.
        "muon_stage2": {**base, "zero_optimization": {"stage": 2}, "gradient_clipping": 1.0,
                        "optimizer": {"type": "Muon", "params": {
                            "lr": 1e-2, "weight_decay": 0.01, "torch_adam": True}}},
        "stage3": {**base, "zero_optimization": {"stage": 3,
                                                 "stage3_param_persistence_threshold": 0}},
        "nvme_stage3": {**base, "zero_optimization": {
            "stage": 3, "offload_optimizer": dict(nvme), "offload_param": dict(nvme),
            "stage3_param_persistence_threshold": 0}},
    }


def run(deepspeed, config, rank, world):
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 3))
    engine, optimizer, _, scheduler = deepspeed.initialize(model=model,
                                                   model_parameters=model.parameters(),
                                                   config=config)
    assert (scheduler is None) == ("scheduler" not in config), scheduler
    losses, lrs, scales = [], [], []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(500 + step)
        x, y = torch.randn(world * MICRO * GAS, 12, generator=g), torch.randn(world * MICRO * GAS, 3,
                                                                            generator=g)
        for m in range(GAS):
            lo = (m * world + rank) * MICRO
            dtype = next(engine.module.parameters()).dtype
            out = engine(x[lo:lo + MICRO].to(dtype)).float()
            loss = torch.nn.functional.mse_loss(out, y[lo:lo + MICRO])
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        lrs.append(engine.get_lr()[0])
        scales.append(float(optimizer.loss_scale))
        if scheduler is not None:
            assert scheduler.get_last_lr() == engine.get_lr(), (scheduler.get_last_lr(), lrs)
    return {"losses": losses, "lrs": lrs, "scales": scales, "skipped": engine.skipped_steps}


def main():
    args, deepspeed = engines.start()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    results = {}
    for name, config in cases(args.out).items():
        if name in ("nvme_stage3", "fp16_stage0") and args.engine == "deepspeed":
            continue  # zerotrain checks these against its own runs (above, and main's end)
        if name.startswith("nvme"):
            os.makedirs(config["zero_optimization"]["offload_param"]["nvme_path"], exist_ok=True)
        results[name] = run(deepspeed, config, rank, world)
    if args.engine == "zerotrain":
        assert results["nvme_stage3"] == results["stage3"], "NVMe offload changed the losses"
        assert results["fp16_stage0"] == results["fp16_stage1"], "fp16 at stage 0 is not stage 1's"
        del results["nvme_stage3"], results["fp16_stage0"]
    # In the same processes: transformers' models under zero.Init (zero_init_hf.py).
    zero_init_hf.build(deepspeed, args.out)
    engines.finish(args.engine, args.out, "paths_rank0.json", results, "config_paths: OK")


if __name__ == "__main__":
    main()
