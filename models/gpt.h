// Gpt: the trainer's small decoder-only transformer (token + position embeddings, pre-LayerNorm
// blocks of causal self-attention and a GELU MLP, a final LayerNorm, output weights tied to the
// token embedding). Built from standard torch::nn submodules so the engine treats it like any
// user model; "checkpoint every k blocks" recomputes blocks during backward (recompute/).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/causal_lm.h"
#include "models/gpt_options.h"

namespace zerotrain::models {

// The module. Parameter names follow nanoGPT's (wte.weight, wpe.weight, h.0.ln_1.weight,
// h.0.attn.c_attn.weight, ..., ln_f.weight); the output projection reuses wte.weight, so
// named_parameters() lists it once. Works with its parameters in fp32, bf16 or fp16: every tensor
// the forward creates takes the parameters' dtype and device.
class Gpt : public CausalLm {
 public:
  // Call ValidateGptOptions first (or use MakeGpt); throws c10::Error on invalid options.
  explicit Gpt(const GptOptions& options);

  // Token ids [B, T] (int64, T <= block_size) -> logits [B, T, vocab_size] in the parameters'
  // dtype.
  at::Tensor forward(const at::Tensor& tokens) override;

  const GptOptions& options() const { return options_; }
  int64_t vocab_size() const override { return options_.vocab_size; }
  int64_t context_size() const override { return options_.block_size; }

 private:
  struct Parts;
  GptOptions options_;
  std::shared_ptr<Parts> parts_;
};

// Validates and builds; LibTorch errors become a Status.
absl::StatusOr<std::shared_ptr<Gpt>> MakeGpt(const GptOptions& options);

// The attention core of every block: q, k, v [B, H, T, D] -> [B, H, T, D], each position
// attending to itself and the earlier ones, softmax(q k^T / sqrt(D)) v with dropout_p applied to
// the attention weights. Through at::scaled_dot_product_attention with is_causal, so CUDA can
// pick its fused kernels (flash, memory-efficient) and no [T, T] mask tensor is made; the CPU
// takes LibTorch's CPU kernels for the same maths.
at::Tensor CausalSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               double dropout_p);

// Mean cross entropy of logits [B, T, V] against next-token targets [B, T], computed in fp32
// whatever the logits' dtype. Returns a scalar fp32 tensor.
at::Tensor GptLoss(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace zerotrain::models
