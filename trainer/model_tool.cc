// --generate and --export_hf (model_tool.h).
#include "trainer/model_tool.h"

#include <torch/nn/module.h>

#include <cstdio>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/saved_checkpoint.h"
#include "hf/hf_export.h"
#include "hf/hf_weights.h"
#include "models/generate.h"
#include "models/model.h"
#include "models/tokenizer.h"
#include "tools/status_macros.h"
#include "trainer/run_checks.h"

namespace zerotrain::trainer {
namespace {

// The fp32 master values of a zerotrain checkpoint, by parameter name, as consolidate reads them.
absl::Status LoadTrainingCheckpoint(const std::string& dir, torch::nn::Module& model) {
  const absl::Status loaded = engine::LoadSavedParameters(dir, model);
  if (loaded.ok()) return loaded;
  return absl::Status(loaded.code(), absl::StrCat("run.resume_from: ", loaded.message()));
}

absl::StatusOr<std::vector<int64_t>> PromptTokens(const ModelToolOptions& o,
                                                  const models::Tokenizer& tokenizer) {
  if (o.prompt_tokens.empty() == o.prompt.empty()) {
    return absl::InvalidArgumentError(
        "--generate takes exactly one of --prompt and --prompt_tokens");
  }
  std::vector<int64_t> tokens;
  if (!o.prompt.empty()) {
    ZT_ASSIGN_OR_RETURN(const std::vector<uint32_t> ids, tokenizer.Encode(o.prompt));
    return std::vector<int64_t>(ids.begin(), ids.end());
  }
  for (absl::string_view part : absl::StrSplit(o.prompt_tokens, ',')) {
    int64_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt_tokens=", o.prompt_tokens, ": '", part, "' is not a token id"));
    }
    tokens.push_back(id);
  }
  return tokens;
}

// A text prompt goes through data.tokenizer (bytes without one); the continuation is printed as
// ids, and as text for a text prompt.
absl::Status PrintContinuation(models::CausalLm& model, const models::Tokenizer& tokenizer,
                               const ModelToolOptions& o) {
  ZT_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, PromptTokens(o, tokenizer));
  models::GenerateOptions g;
  g.greedy = o.temperature == 0;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.seed = o.seed;
  g.max_new_tokens = o.max_new_tokens;
  const size_t n = prompt.size();
  ZT_ASSIGN_OR_RETURN(std::vector<int64_t> all, models::ContinueTokens(model, prompt, g));
  const std::vector<int64_t> added(all.begin() + n, all.end());
  const std::string how = g.greedy ? "greedy"
                                   : absl::StrCat("temperature ", o.temperature, ", top_k ",
                                                  o.top_k, ", seed ", o.seed);
  std::printf("zerotrain: continuation (%zu tokens, %s): %s\n", added.size(), how.c_str(),
              absl::StrJoin(added, " ").c_str());
  if (!o.prompt.empty()) std::printf("%s\n", tokenizer.Decode(all).c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunModelTool(const TrainerConfig& config, const ModelToolOptions& o) {
  if (config.model.family == models::ModelFamily::kResNet) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--generate and --export_hf take a language model (model.name gpt2 or llama), not ",
        models::ModelName(config.model)));
  }
  // Before the model is built or loaded: a directory that cannot be written is bad input.
  if (!o.export_hf.empty()) ZT_RETURN_IF_ERROR(CheckOutputDirWritable(o.export_hf, "--export_hf"));
  torch::manual_seed(config.run.seed);
  ZT_ASSIGN_OR_RETURN(std::shared_ptr<models::TrainerModel> built, models::MakeModel(config.model));
  std::shared_ptr<models::CausalLm> model = std::dynamic_pointer_cast<models::CausalLm>(built);
  std::string source = "random initialisation";
  if (!config.run.resume_from.empty()) {
    ZT_RETURN_IF_ERROR(LoadTrainingCheckpoint(config.run.resume_from, *model));
    source = config.run.resume_from;
  } else if (!config.model.init_from.empty()) {
    ZT_RETURN_IF_ERROR(hf::LoadHfWeights(config.model.init_from, config.model, *model).status());
    source = config.model.init_from;
  }
  std::printf("zerotrain: %s model, %.2fM parameters, weights from %s\n",
              models::ModelName(config.model).c_str(),
              models::ModelParameterCount(config.model) / 1e6, source.c_str());
  if (!o.export_hf.empty()) {
    std::vector<std::pair<std::string, at::Tensor>> params;
    for (const auto& item : model->named_parameters()) {
      params.emplace_back(item.key(), item.value().detach());
    }
    ZT_ASSIGN_OR_RETURN(
        std::vector<std::string> files,
        hf::WriteHfCheckpoint(o.export_hf, config.model, params, o.max_shard_bytes));
    std::printf("zerotrain: wrote a Hugging Face checkpoint to %s (%zu files)\n",
                o.export_hf.c_str(), files.size());
  }
  if (o.generate) {
    ZT_ASSIGN_OR_RETURN(const std::unique_ptr<models::Tokenizer> tokenizer,
                        models::LoadTokenizer(config.data.tokenizer));
    ZT_RETURN_IF_ERROR(PrintContinuation(*model, *tokenizer, o));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::trainer
