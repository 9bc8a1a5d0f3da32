// //trainer:main's single-process modes, for a model the config describes: --generate continues
// a prompt and --export_hf writes a Hugging Face checkpoint. The weights are model.init_from's,
// or the zerotrain checkpoint run.resume_from names (its fp32 master values), or random. No
// ranks are started; the model is built on the CPU.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {

struct ModelToolOptions {
  std::string export_hf;                    // a directory to write; "" = no export
  int64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"
  bool generate = false;
  std::string prompt;         // text, one token per byte (byte-level models)
  std::string prompt_tokens;  // token ids, comma-separated
  int64_t max_new_tokens = 100;
  double temperature = 0;  // 0 = greedy
  int64_t top_k = 0;       // 0 = the whole vocabulary
  uint64_t seed = 1234;
};

// Loads the weights, then exports and/or generates, printing what it did. Errors name the file
// or flag and the value.
absl::Status RunModelTool(const TrainerConfig& config, const ModelToolOptions& options);

}  // namespace zerotrain::trainer
