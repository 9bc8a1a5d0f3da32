// The trainer's models out as Hugging Face checkpoints: a directory of safetensors (sharded with
// model.safetensors.index.json past a size) and a config.json in the family's own keys, which
// transformers' GPT2LMHeadModel / LlamaForCausalLM.from_pretrained and safetensors load unchanged.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace zerotrain::hf {

// transformers' config.json for `options` (architectures, model_type and the family's sizes).
std::string HfConfigJson(const models::ModelOptions& options);

// The checkpoint name of one of our parameters, and whether it is stored transposed (GPT-2's
// Conv1D keeps [in, out]): the inverse of hf_weights.h's MapHfTensorName.
std::pair<std::string, bool> HfNameOf(const models::ModelOptions& options, const std::string& ours);

// Writes `params` (our names, any dtype and device; written as they are) and config.json into
// `dir`, creating it: model.safetensors, or model-0000i-of-0000N.safetensors and the index when
// they pass max_shard_bytes. Returns the files written.
absl::StatusOr<std::vector<std::string>> WriteHfCheckpoint(
    const std::string& dir, const models::ModelOptions& options,
    const std::vector<std::pair<std::string, at::Tensor>>& params, int64_t max_shard_bytes);

}  // namespace zerotrain::hf
