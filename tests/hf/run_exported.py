"""Loads a checkpoint directory zerotrain wrote (//trainer:main --export_hf) with transformers'
AutoModelForCausalLM.from_pretrained, unchanged, and saves its logits for the reference tokens.
Usage: run_exported.py CHECKPOINT_DIR EXPECTED_SAFETENSORS OUT_SAFETENSORS"""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def main(checkpoint, expected, out):
    # One thread here and in make_models.py: the logits are compared bitwise, and how a matmul is
    # split among threads (which a loaded machine can change from run to run) changes the sums.
    torch.set_num_threads(1)
    tokens = load_file(expected)["tokens"]
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        logits = model(tokens).logits.float().contiguous()
    save_file({"logits": logits}, out)
    print(type(model).__name__)


if __name__ == "__main__":
    main(*sys.argv[1:4])
