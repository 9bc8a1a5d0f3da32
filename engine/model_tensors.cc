// Walks a LibTorch module into the Engine's ModelTensors.
#include "engine/model_tensors.h"

#include <torch/nn/module.h>

#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace zerotrain::engine {

ModelTensors TensorsOf(torch::nn::Module& module) {
  ModelTensors out;
  std::unordered_set<const void*> seen;
  int index = 0;
  module.apply([&](const std::string& prefix, torch::nn::Module& m) {
    for (const auto& item : m.named_parameters(/*recurse=*/false)) {
      const at::Tensor& p = item.value();
      if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      out.trainable.push_back(
          {prefix.empty() ? item.key() : absl::StrCat(prefix, ".", item.key()), p, index});
    }
    ++index;
  });
  for (const at::Tensor& p : module.parameters(/*recurse=*/true)) {
    if (!p.requires_grad()) out.frozen.push_back(p);
  }
  out.buffers = module.buffers(/*recurse=*/true);
  return out;
}

}  // namespace zerotrain::engine
