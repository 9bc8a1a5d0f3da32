// LlamaOptions: what builds a Llama (llama.h), and the checks and counts that need no module, in
// a header without LibTorch's module headers (as gpt_options.h).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "models/submodule_hook.h"

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

}  // namespace zerotrain::models
