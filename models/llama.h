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

namespace zerotrain::models {

// The defaults mirror GptOptions' model (n_kv_head = n_head, so plain multi-head attention).
struct LlamaOptions {
  int64_t vocab_size = 256;  // byte-level by default; at most kMaxVocabSize (gpt.h)
  int64_t block_size = 128;  // context length in tokens (rotary embeddings have no table)
  int64_t n_layer = 4;
  int64_t n_head = 6;
  // Key/value heads (grouped-query attention): each serves n_head / n_kv_head consecutive query
  // heads. 0 means n_head.
  int64_t n_kv_head = 0;
  int64_t n_embd = 384;
  int64_t intermediate_size = 0;  // the MLP's width; 0 = LlamaDefaultIntermediateSize(n_embd)
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  // Output projection reuses model.embed_tokens.weight (one parameter, no lm_head.weight).
  bool tie_word_embeddings = false;
  // As GptOptions: block i is checkpointed when checkpoint_every > 0 and i % checkpoint_every
  // == 0.
  int64_t checkpoint_every = 0;
  bool cpu_checkpointing = false;  // keep checkpointed block inputs in host memory
  bool profile_checkpointing = false;
  // As GptOptions: each submodule (model.embed_tokens, every layer, model.norm, then lm_head
  // when untied) is initialised right after it is built and handed to this, which may partition
  // it (partition/sharded_init.h). Initial values then differ from an unset hook's.
  SubmoduleHook after_submodule;
};

// Meta's MLP width for a model width: 8 * n_embd / 3 (the 2/3 of a 4x MLP that keeps SwiGLU's
// three matrices at the parameter count of a GELU MLP's two), floored, then rounded up to a
// multiple of 256 (their multiple_of) for matmul-friendly shapes. 4096 -> 11008.
int64_t LlamaDefaultIntermediateSize(int64_t n_embd);

// Rejects values that cannot build a model, naming the field and value.
absl::Status ValidateLlamaOptions(const LlamaOptions& options);

// The number of trainable parameters a LlamaOptions builds (a tied output counted once).
int64_t LlamaParameterCount(const LlamaOptions& options);

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
