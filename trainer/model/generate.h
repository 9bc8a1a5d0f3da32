// Sampling text from a byte-level Gpt: the default run ends by printing a short sample.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/model/gpt.h"

namespace zerotrain::trainer {

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  double temperature = 0.8;  // > 0; logits are divided by it
  int64_t top_k = 40;        // 0 = sample from the whole vocabulary
  uint64_t seed = 1234;      // its own generator: the global RNG is left untouched
};

// Continues `prompt` (bytes as tokens; an empty prompt starts from "\n") for max_new_tokens
// sampled tokens, feeding the model at most block_size tokens of context. Runs without grad and
// in eval mode (the module's training flag is restored). Returns prompt + continuation with bytes
// other than printable ASCII, newline and tab replaced by '?'.
absl::StatusOr<std::string> Generate(Gpt& model, const std::string& prompt,
                                     const GenerateOptions& options);

}  // namespace zerotrain::trainer
