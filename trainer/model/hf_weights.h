// Hugging Face weights into the trainer's modules (model.init_from): GPT2LMHeadModel's names and
// transposed Conv1D matrices onto Gpt, LlamaForCausalLM's names onto Llama (the same names), from
// safetensors (one file, or shards with their index) or a torch.save state dict.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/model/model.h"

namespace zerotrain::trainer {

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
HfTensorName MapHfTensorName(const ModelOptions& options, const std::string& hf_name);

// Copies every parameter of `model` (built from `options`) from the checkpoint at `path`
// (hf_config.h's FindHfCheckpoint), converting dtypes. Missing, unexpected and mis-shaped tensors
// are all named in one InvalidArgument error, and nothing is copied then.
absl::StatusOr<HfLoadReport> LoadHfWeights(const std::string& path, const ModelOptions& options,
                                           torch::nn::Module& model);

}  // namespace zerotrain::trainer
