// Sampling from a model (any CausalLm), as token ids or as text through a tokenizer: the default
// run ends by printing a short sample.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/causal_lm.h"
#include "models/tokenizer.h"

namespace zerotrain::models {

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  bool greedy = false;       // the most likely token each time (temperature and top_k unused)
  double temperature = 0.8;  // > 0; logits are divided by it
  int64_t top_k = 40;        // 0 = sample from the whole vocabulary
  uint64_t seed = 1234;      // its own generator: the global RNG is left untouched
  // Opened around each forward and held while it runs, when set: an engine's forward scope, in
  // which ZeRO stage 3 gathers each submodule's parameters as it runs. Every rank then generates
  // (the gathers are collective), one submodule's parameters at a time instead of the whole model.
  std::function<std::shared_ptr<void>()> forward_scope;
};

// `tokens` followed by max_new_tokens more, each the model's next token given at most
// context_size() tokens before it. Runs without grad and in eval mode (the module's training flag
// is restored).
absl::StatusOr<std::vector<int64_t>> ContinueTokens(CausalLm& model, std::vector<int64_t> tokens,
                                                    const GenerateOptions& options);

// Continues `prompt` (an empty one starts from "\n") as ContinueTokens does, through `tokenizer`
// both ways; returns prompt + continuation as the tokenizer decodes them.
absl::StatusOr<std::string> Generate(CausalLm& model, const Tokenizer& tokenizer,
                                     const std::string& prompt, const GenerateOptions& options);

// The same with bytes as tokens (a byte-level model); bytes other than printable ASCII, newline
// and tab come back as '?'.
absl::StatusOr<std::string> Generate(CausalLm& model, const std::string& prompt,
                                     const GenerateOptions& options);

}  // namespace zerotrain::models
