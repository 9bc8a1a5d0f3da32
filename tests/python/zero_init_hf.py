"""transformers models built under zero.Init as DeepSpeed 0.19.8 builds them: GPT2LMHeadModel and
LlamaForCausalLM constructed inside the block (their post_init runs on parameters already
partitioned, which DeepSpeed leaves as the constructors made them too), then initialize and one
forward. config_paths.py calls build() on every rank of its torchrun, on zerotrain and (--engine
deepspeed) on DeepSpeed; rank 0 writes the gathered parameters and the loss to
OUT/zero_init_hf_rank0.pt, which python_test.sh compares between the two engines: parameters
bitwise, loss within 1e-6 relative.
"""
import os

import torch
import transformers


CONFIG = {"train_micro_batch_size_per_gpu": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
MODELS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)),
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)),
}


def build(deepspeed, out):
    results = {}
    for name, make in MODELS.items():
        torch.manual_seed(5)
        with deepspeed.zero.Init(config_dict_or_path=CONFIG):
            model = make()
        engine, *_ = deepspeed.initialize(model=model, config=CONFIG)
        ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(9))
        engine.eval()
        with torch.no_grad():
            loss = engine(input_ids=ids, labels=ids).loss.item()
        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            params = {n: p.detach().clone() for n, p in model.named_parameters()}
        results[name] = {"loss": loss, "params": params}
    if int(os.environ["RANK"]) == 0:
        torch.save(results, os.path.join(out, "zero_init_hf_rank0.pt"))
