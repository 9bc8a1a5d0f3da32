// A Hugging Face checkpoint through @zerotrain//hf and @zerotrain//models alone: reads the config
// and weights of tiny random GPT-2 and Llama models that transformers saved (tests/hf/
// make_models.py: one safetensors file, and shards with their index), builds our module from the
// config, runs a forward, and compares the logits with the ones transformers computed and stored
// beside them (expected.safetensors). Exits non-zero naming the model on any difference.
//   hf_forward <directory make_models.py wrote>
#include <ATen/core/Tensor.h>
#include <torch/types.h>

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "hf/hf_config.h"
#include "hf/hf_weights.h"
#include "hf/safetensors.h"
#include "models/causal_lm.h"
#include "models/model.h"

namespace {

namespace hf = zerotrain::hf;
namespace models = zerotrain::models;

absl::StatusOr<at::Tensor> Expected(const std::string& dir, const std::string& name) {
  absl::StatusOr<hf::SafetensorsHeader> header =
      hf::ReadSafetensorsHeader(dir + "/expected.safetensors");
  if (!header.ok()) return header.status();
  return hf::ReadSafetensorsTensor(*header, name);
}

// The largest difference between our logits and transformers' for the model in dir/name.
absl::StatusOr<double> LogitDifference(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  models::ModelOptions options;
  absl::StatusOr<bool> has_config = hf::ReadHfArchitecture(path, &options);
  if (!has_config.ok()) return has_config.status();
  if (!*has_config) return absl::NotFoundError(path + " has no config.json");
  absl::StatusOr<std::shared_ptr<models::TrainerModel>> model = models::MakeModel(options);
  if (!model.ok()) return model.status();
  absl::StatusOr<hf::HfLoadReport> loaded = hf::LoadHfWeights(path, options, **model);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<at::Tensor> tokens = Expected(dir, "tokens");
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<at::Tensor> want = Expected(dir, name + ".logits");
  if (!want.ok()) return want.status();
  (*model)->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor got = (*model)->forward(*tokens).to(torch::kFloat);
  if (got.sizes() != want->sizes()) return absl::InternalError("logits of another shape");
  std::printf("hf_forward: %s: %lld tensors loaded, logits [%lld, %lld, %lld]\n", name.c_str(),
              static_cast<long long>(loaded->tensors), static_cast<long long>(got.size(0)),
              static_cast<long long>(got.size(1)), static_cast<long long>(got.size(2)));
  return (got - *want).abs().max().item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hf_forward <directory tests/hf/make_models.py wrote>\n");
    return 2;
  }
  for (const std::string name : {"gpt2", "llama"}) {
    absl::StatusOr<double> diff = LogitDifference(argv[1], name);
    if (!diff.ok()) {
      std::fprintf(stderr, "hf_forward: %s: %s\n", name.c_str(), diff.status().ToString().c_str());
      return 1;
    }
    if (!(*diff < 2e-5)) {
      std::fprintf(stderr, "hf_forward: %s: logits differ from transformers' by %g\n", name.c_str(),
                   *diff);
      return 1;
    }
    std::printf("hf_forward: %s: logits within %.1e of transformers'\n", name.c_str(), *diff);
  }
  return 0;
}
