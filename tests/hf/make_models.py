"""Builds tiny random GPT-2 and Llama models with Hugging Face transformers (the reference) and
saves them as save_pretrained and torch.save write them, with the logits and greedy continuations
transformers computes for fixed tokens. hf_models_test loads the same files into zerotrain's
models and compares. Usage: make_models.py OUT_DIR"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VOCAB, CONTEXT = 96, 32


def perturbed(model):
    # transformers starts biases at 0 and norms at 1; noise makes every tensor matter.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def record(expected, name, model, tokens):
    with torch.no_grad():
        expected[name + ".logits"] = model(tokens).logits.float().contiguous()
        greedy = model.generate(tokens[:1], max_new_tokens=10, do_sample=False,
                                pad_token_id=0, attention_mask=torch.ones_like(tokens[:1]))
    expected[name + ".greedy"] = greedy[0].contiguous()


def main(out):
    torch.set_num_threads(1)  # as run_exported.py, whose logits are compared bitwise with ours
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (2, 12))
    expected = {"tokens": tokens}

    gpt2 = perturbed(GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=CONTEXT, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)))
    gpt2.save_pretrained(os.path.join(out, "gpt2"))
    record(expected, "gpt2", gpt2, tokens)
    # The same weights as transformers writes a torch.save checkpoint (pytorch_model.bin).
    gpt2.save_pretrained(os.path.join(out, "gpt2_bin"), safe_serialization=False)

    llama = perturbed(LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
        rope_theta=500.0, rms_norm_eps=1e-5, tie_word_embeddings=False)))
    # Small shards: model.safetensors.index.json and several files.
    llama.save_pretrained(os.path.join(out, "llama"), max_shard_size="20KB")
    record(expected, "llama", llama, tokens)

    tied = perturbed(LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=CONTEXT,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)))
    tied.save_pretrained(os.path.join(out, "llama_tied"))
    record(expected, "llama_tied", tied, tokens)

    save_file(expected, os.path.join(out, "expected.safetensors"))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
