// The transformers side of tests/hf: make_models.py's tiny models and outputs, made once per test
// binary in its temporary directory, and run_exported.py's logits for a checkpoint we wrote.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::testing {

// The directory make_models.py filled: gpt2/, gpt2_bin/, llama/ (sharded), llama_tied/ and
// expected.safetensors (tokens, <name>.logits, <name>.greedy). Runs it on the first call.
absl::StatusOr<std::string> HfModelsDir();

// A tensor of expected.safetensors.
absl::StatusOr<at::Tensor> HfExpected(const std::string& name);

// A tensor of a safetensors file.
absl::StatusOr<at::Tensor> ReadTensor(const std::string& file, const std::string& name);

// transformers' logits for the reference tokens from the checkpoint directory `dir`, and the
// class from_pretrained built.
struct HfRun {
  at::Tensor logits;
  std::string model_class;
};
absl::StatusOr<HfRun> RunExportedInTransformers(const std::string& dir);

}  // namespace zerotrain::testing
