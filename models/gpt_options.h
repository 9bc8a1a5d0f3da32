// GptOptions: what builds a Gpt (gpt.h), and the checks and counts that need no module, in a
// header without LibTorch's module headers, for the code that only reads or checks a model's
// options (the trainer's config, the memory advisor).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "models/submodule_hook.h"

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

}  // namespace zerotrain::models
