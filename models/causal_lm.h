// TrainerModel: what //trainer:main needs of any model it trains (Gpt, Llama, ResNet): inputs
// in, logits out for a cross-entropy loss. CausalLm: a language model, which can also continue a
// prompt. The engine never sees these; it takes any torch::nn::Module.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>

#include "models/submodule_hook.h"

namespace zerotrain::models {

class TrainerModel : public torch::nn::Module {
 public:
  // A batch of inputs -> logits whose last dimension is the classes (next tokens, labels).
  virtual at::Tensor forward(const at::Tensor& inputs) = 0;
};

class CausalLm : public TrainerModel {
 public:
  // Token ids [B, T] (int64, T <= the model's context) -> logits [B, T, vocab_size] in the
  // parameters' dtype.
  at::Tensor forward(const at::Tensor& tokens) override = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t context_size() const = 0;  // the longest T forward takes
};

}  // namespace zerotrain::models
