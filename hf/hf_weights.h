// Hugging Face weights into the trainer's modules (model.init_from): GPT2LMHeadModel's names and
// transposed Conv1D matrices onto Gpt, LlamaForCausalLM's names onto Llama (the same names), from
// safetensors (one file, or shards with their index) or a torch.save state dict.
#pragma once

#include <torch/nn/module.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace zerotrain::hf {

struct HfLoadReport {
  int64_t tensors = 0;
  int64_t bytes = 0;  // as stored in the checkpoint
  double seconds = 0;
};

// Our parameter name for a checkpoint tensor, and whether the checkpoint stores it transposed
// (GPT-2's Conv1D keeps [in, out]); ignored is true for what carries no weights of ours (GPT-2's
// attention-mask buffers, Llama's rotary inv_freq, a tied output's copy).
struct HfTensorName {
  std::string ours;
  bool transposed = false;
  bool ignored = false;
};
HfTensorName MapHfTensorName(const models::ModelOptions& options, const std::string& hf_name);

// A checkpoint's tensors, listed once (safetensors headers only; a torch.save file is read
// whole), then loaded part by part: ZeRO stage 3 fills each submodule as the model builds it,
// before ShardedInit partitions it, so no rank ever holds the whole model.
class HfWeightsReader {
 public:
  static absl::StatusOr<std::unique_ptr<HfWeightsReader>> Open(const std::string& path,
                                                               const models::ModelOptions& options);

  // Checks every parameter of `module`, whose names in the model are `prefix` + "." + its own
  // ("" for the whole model), against the checkpoint: missing and mis-shaped tensors (and, for the
  // whole model, unexpected ones) are one InvalidArgument error, and nothing is copied then.
  // With copy, then reads and copies them (converting dtypes); without, only checks, so ranks
  // that do not hold the values check the same things and fail alike.
  absl::Status Load(const std::string& prefix, torch::nn::Module& module, bool copy = true);

  // After the parts: checkpoint tensors that no Load took are unexpected, one error naming them.
  absl::Status Finish();

  const HfLoadReport& report() const { return report_; }

 private:
  struct Source;
  HfWeightsReader() = default;
  std::string path_;
  models::ModelOptions options_;
  std::map<std::string, std::shared_ptr<Source>> by_ours_;  // our name -> its tensor
  std::vector<std::string> unmapped_;                       // checkpoint names with no use here
  std::map<std::string, bool> taken_;                       // our names Load has checked
  HfLoadReport report_;
  std::chrono::steady_clock::time_point start_;
};

// Open, Load of the whole model, Finish: the model's every parameter from the checkpoint at
// `path` (hf_config.h's FindHfCheckpoint).
absl::StatusOr<HfLoadReport> LoadHfWeights(const std::string& path,
                                           const models::ModelOptions& options,
                                           torch::nn::Module& model);

}  // namespace zerotrain::hf
