// Llama: Meta's decoder-only transformer as Hugging Face transformers' LlamaForCausalLM computes
// it (RMSNorm, rotary position embeddings, grouped-query attention, a SwiGLU MLP, optionally
// tied output weights), with HF's parameter names so a checkpoint loads name for name. Built
// from standard torch::nn submodules like Gpt (gpt.h), with the same activation checkpointing
// and ZeRO-3 partitioned construction.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/causal_lm.h"
#include "models/llama_options.h"

namespace zerotrain::models {

// The module. Parameter names are LlamaForCausalLM's: model.embed_tokens.weight,
// model.layers.{i}.{input_layernorm,post_attention_layernorm}.weight,
// model.layers.{i}.self_attn.{q,k,v,o}_proj.weight,
// model.layers.{i}.mlp.{gate,up,down}_proj.weight, model.norm.weight and, untied, lm_head.weight.
// Works with its parameters in fp32 or bf16: every tensor the forward creates takes the parameters'
// dtype and device.
class Llama : public CausalLm {
 public:
  // Call ValidateLlamaOptions first (or use MakeLlama); throws c10::Error on invalid options.
  explicit Llama(const LlamaOptions& options);

  // Token ids [B, T] (int64, T <= block_size) at positions 0..T-1 -> logits [B, T, vocab_size]
  // in the parameters' dtype.
  at::Tensor forward(const at::Tensor& tokens) override;

  // As given: n_kv_head and intermediate_size keep their 0s.
  const LlamaOptions& options() const { return options_; }
  int64_t vocab_size() const override { return options_.vocab_size; }
  int64_t context_size() const override { return options_.block_size; }

 private:
  struct Parts;
  LlamaOptions options_;
  std::shared_ptr<Parts> parts_;
};

// Validates and builds; LibTorch errors become a Status.
absl::StatusOr<std::shared_ptr<Llama>> MakeLlama(const LlamaOptions& options);

}  // namespace zerotrain::models
