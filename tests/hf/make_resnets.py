"""Builds torchvision's ResNet-18 and ResNet-50 (10 classes) with perturbed weights and BatchNorm
statistics and saves, per depth, the state dict and what torchvision computes for fixed images:
eval-mode logits, train-mode logits and the running statistics that forward leaves.
resnet_test loads the same state dict into zerotrain's ResNet and compares.
Usage: make_resnets.py OUT_DIR"""
import os
import sys

import torch
from safetensors.torch import save_file
from torchvision.models import resnet18, resnet50


def main(out):
    torch.manual_seed(0)
    images = torch.randn(2, 3, 64, 64)
    expected = {"images": images}
    for depth, build in ((18, resnet18), (50, resnet50)):
        model = build(num_classes=10)
        with torch.no_grad():
            for name, t in model.state_dict().items():
                if name.endswith("running_var"):
                    t.mul_(torch.rand_like(t) + 0.5)
                elif t.is_floating_point():
                    t.add_(torch.randn_like(t) * 0.05)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, os.path.join(out, f"resnet{depth}.safetensors"))
        params = sum(p.numel() for p in model.parameters())
        expected[f"resnet{depth}.params"] = torch.tensor([params])
        with torch.no_grad():
            expected[f"resnet{depth}.eval"] = model.eval()(images)
            expected[f"resnet{depth}.train"] = model.train()(images)
        expected[f"resnet{depth}.bn1.running_mean"] = model.bn1.running_mean.clone()
        expected[f"resnet{depth}.layer4.1.bn2.running_var"] = (
            model.layer4[1].bn2.running_var.clone())
    save_file(expected, os.path.join(out, "expected_resnets.safetensors"))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
