// A Hugging Face checkpoint as model.init_from names it: which files hold its weights, and the
// architecture its config.json describes, as the trainer's ModelOptions (GPT2LMHeadModel and
// LlamaForCausalLM configurations).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace zerotrain::hf {

struct HfCheckpointFiles {
  enum class Format {
    kSafetensors,  // one or more .safetensors files (several with model.safetensors.index.json)
    kTorchSave,    // a torch.save state dict (pytorch_model.bin)
  };
  Format format = Format::kSafetensors;
  std::vector<std::string> weight_files;
  std::string index;        // the sharded checkpoint's index JSON, or ""
  std::string config_json;  // "" when the checkpoint has none
};

// `path` is a checkpoint directory (model.safetensors, model.safetensors.index.json or
// pytorch_model.bin, with config.json beside them) or one of those files (its directory's
// config.json is used when there is one). A path that holds none is an error naming it.
absl::StatusOr<HfCheckpointFiles> FindHfCheckpoint(const std::string& path);

// Fills the family and architecture fields of `options` from the checkpoint's config.json and
// returns true; returns false, leaving `options` as it was, when the checkpoint has none. A
// config this trainer cannot build the same (another model_type, GPT-2 without a tied output,
// Llama with rope_scaling, biases or another activation) is an error naming the key and value.
absl::StatusOr<bool> ReadHfArchitecture(const std::string& path, models::ModelOptions* options);

// Parses config.json's text (the file named `what` in errors) into `options`.
absl::Status ParseHfConfig(const std::string& text, const std::string& what,
                           models::ModelOptions* options);

}  // namespace zerotrain::hf
