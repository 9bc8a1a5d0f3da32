// ResNet: the image classifier family (ResNet-18 and ResNet-50, He et al.) as torchvision builds
// it, with torchvision's parameter and buffer names, so its state dicts load name for name. Built
// from standard torch::nn modules (Conv2d, BatchNorm2d, Linear) so the engine shards it like any
// user model; residual blocks can be recomputed during backward (recompute/).
// //trainer:main trains it on CIFAR-10's binary records (model.name "resnet18"/"resnet50",
// data.source "images").
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "models/causal_lm.h"
#include "models/resnet_options.h"

namespace zerotrain::models {

class ResNet : public TrainerModel {
 public:
  explicit ResNet(const ResNetOptions& options);  // throws c10::Error on invalid options

  // Images [B, 3, H, W] (any H, W >= 32: the stem and three strided stages divide by 32, then a
  // global average) -> class logits [B, num_classes]. BatchNorm uses the batch's statistics and
  // updates its running ones in training mode, and the running ones in eval mode.
  at::Tensor forward(const at::Tensor& images) override;

  const ResNetOptions& options() const { return options_; }

 private:
  struct Parts;
  ResNetOptions options_;
  std::shared_ptr<Parts> parts_;
};

absl::StatusOr<std::shared_ptr<ResNet>> MakeResNet(const ResNetOptions& options);

}  // namespace zerotrain::models
