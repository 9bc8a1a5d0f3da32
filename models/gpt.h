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

namespace zerotrain::models {

// The defaults are the default run's model: 7.2M parameters, about 0.3 s per forward+backward of
// an 8 x 128 micro-batch on one core in bf16 (docs/MODEL.md has the measurements).
struct GptOptions {
  int64_t vocab_size = 256;  // byte-level by default
  int64_t block_size = 128;  // context length in tokens
  int64_t n_layer = 4;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  double dropout = 0.0;
  // The MLP's GELU by its tanh approximation (GPT-2's "gelu_new"), as Hugging Face's GPT-2
  // weights were trained; false: the exact erf form.
  bool gelu_tanh = false;
  // Wrap every k-th block in activation checkpointing (0 = none, 1 = every block): block i is
  // checkpointed when i % k == 0.
  int64_t checkpoint_every = 0;
  bool cpu_checkpointing = false;  // keep checkpointed block inputs in host memory
  bool profile_checkpointing = false;
  // When set, each submodule (the embeddings, every block, the final LayerNorm) is initialised
  // right after it is built and then handed to this, which may partition it (ZeRO stage 3's
  // partitioned construction, partition/sharded_init.h), so the whole model never exists at
  // once. The initial values then differ from an unset hook's (the random draws interleave).
  SubmoduleHook after_submodule;
};

// Token ids are read as uint32 (trainer/data/token_files.h) and embedded through int64 indices;
// the bound keeps the embedding's row count an int32, which every backend's kernels accept.
inline constexpr int64_t kMaxVocabSize = 2147483647;

// Rejects values that cannot build a model, naming the field and value.
absl::Status ValidateGptOptions(const GptOptions& options);

// The number of trainable parameters a GptOptions builds (tied weights counted once).
int64_t GptParameterCount(const GptOptions& options);

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
