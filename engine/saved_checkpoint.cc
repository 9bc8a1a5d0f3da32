// SavedCheckpoint through checkpoint/'s CheckpointReader; the batch layout parsed from the
// config_text lines Engine::SaveCheckpoint writes ("key: value"), here beside that writer's
// engine rather than in each program that reads it.
#include "engine/saved_checkpoint.h"

#include <ATen/ops/from_blob.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint_reader.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

int64_t ConfigInt(const std::string& config_text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(config_text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ": ");
    int64_t value = 0;
    if (kv.first == key && absl::SimpleAtoi(kv.second, &value)) return value;
  }
  return 0;
}

}  // namespace

bool HasCheckpoint(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/" + checkpoint::kLatestFileName, ec);
}

absl::StatusOr<SavedCheckpoint> ReadSavedCheckpoint(const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(const std::unique_ptr<checkpoint::CheckpointReader> reader,
                      checkpoint::CheckpointReader::Open(dir));
  const checkpoint::Manifest& m = reader->manifest();
  SavedCheckpoint saved;
  saved.tag_dir = reader->tag_dir();
  for (const checkpoint::ParameterEntry& p : m.params())
    saved.params.push_back({p.name(), p.numel()});
  saved.client_state.insert(m.client_state().begin(), m.client_state().end());
  saved.optimizer_steps = m.optimizer_steps();
  saved.train_batch_size = ConfigInt(m.config_text(), "train_batch_size");
  saved.gradient_accumulation_steps = ConfigInt(m.config_text(), "gradient_accumulation_steps");
  return saved;
}

absl::Status LoadSavedParameters(const std::string& dir, torch::nn::Module& model) {
  ZT_ASSIGN_OR_RETURN(auto reader, checkpoint::CheckpointReader::Open(dir));
  ZT_RETURN_IF_ERROR(reader->VerifyFileChecksums());
  std::map<std::string, int> index;
  for (int i = 0; i < reader->num_params(); ++i) index[reader->manifest().params(i).name()] = i;
  std::vector<std::string> problems;
  for (const auto& item : model.named_parameters()) {
    auto it = index.find(item.key());
    if (it == index.end()) {
      problems.push_back(absl::StrCat(item.key(), " is not in it"));
    } else if (reader->manifest().params(it->second).numel() != item.value().numel()) {
      problems.push_back(absl::StrCat(item.key(), " has ",
                                      reader->manifest().params(it->second).numel(),
                                      " elements where the model has ", item.value().numel()));
    }
  }
  if (!problems.empty() || index.size() != model.named_parameters().size()) {
    problems.push_back(absl::StrCat("it holds ", index.size(), " parameters, the model ",
                                    model.named_parameters().size()));
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint ", dir, " does not fit the model: ", absl::StrJoin(problems, "; ")));
  }
  at::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    ZT_ASSIGN_OR_RETURN(std::vector<float> values, reader->ReadParam(index[item.key()]));
    item.value().copy_(at::from_blob(values.data(), item.value().sizes(), at::kFloat));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::engine
