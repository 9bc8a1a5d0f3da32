// Autoregressive sampling with temperature and top-k from a private generator.
#include "models/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::models {
namespace {

// Restores the module's training flag however Generate leaves.
class EvalModeScope {
 public:
  explicit EvalModeScope(torch::nn::Module& m) : module_(m), was_training_(m.is_training()) {
    module_.eval();
  }
  ~EvalModeScope() { module_.train(was_training_); }

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> ContinueTokens(CausalLm& model, std::vector<int64_t> tokens,
                                                    const GenerateOptions& options) {
  if (!options.greedy && !(options.temperature > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample temperature must be positive, got ", options.temperature));
  }
  if (options.top_k < 0 || options.max_new_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sample top_k (", options.top_k,
                                                   ") and max_new_tokens (", options.max_new_tokens,
                                                   ") must not be negative"));
  }
  for (int64_t t : tokens) {
    if (t < 0 || t >= model.vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token ", t, " is outside vocab_size ", model.vocab_size()));
    }
  }
  if (tokens.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  try {
    torch::NoGradGuard no_grad;
    EvalModeScope eval(model);
    const torch::Device device = model.parameters().front().device();
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
    for (int64_t i = 0; i < options.max_new_tokens; ++i) {
      const int64_t start =
          std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - model.context_size());
      at::Tensor context =
          torch::tensor(std::vector<int64_t>(tokens.begin() + start, tokens.end()), torch::kLong)
              .unsqueeze(0)
              .to(device);
      at::Tensor logits;
      {
        const std::shared_ptr<void> scope =
            options.forward_scope ? options.forward_scope() : nullptr;
        logits = model.forward(context).select(1, -1).squeeze(0).to(torch::kFloat).cpu();
      }
      if (options.greedy) {
        tokens.push_back(logits.argmax().item<int64_t>());
        continue;
      }
      logits = logits / options.temperature;
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        at::Tensor kth = std::get<0>(logits.topk(options.top_k)).min();
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      at::Tensor probs = torch::softmax(logits, 0);
      tokens.push_back(torch::multinomial(probs, 1, false, gen).item<int64_t>());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("generating from the model: ", e.what()));
  }
  return tokens;
}

absl::StatusOr<std::string> Generate(CausalLm& model, const Tokenizer& tokenizer,
                                     const std::string& prompt, const GenerateOptions& options) {
  absl::StatusOr<std::vector<uint32_t>> ids = tokenizer.Encode(prompt.empty() ? "\n" : prompt);
  if (!ids.ok()) return ids.status();
  // ContinueTokens checks the ids against the model's vocabulary.
  std::vector<int64_t> tokens(ids->begin(), ids->end());
  absl::StatusOr<std::vector<int64_t>> all = ContinueTokens(model, std::move(tokens), options);
  if (!all.ok()) return all.status();
  return tokenizer.Decode(*all);
}

absl::StatusOr<std::string> Generate(CausalLm& model, const std::string& prompt,
                                     const GenerateOptions& options) {
  return Generate(model, *MakeByteTokenizer(), prompt, options);
}

}  // namespace zerotrain::models
