// ModelTensors: what the Engine takes of a model, whatever built it (a LibTorch module, a Python
// module through python/'s binding, a hand-made list): its trainable parameters, each with the
// submodule that holds it, and the frozen parameters and buffers that start from rank 0's values.
// Engine::Create on a torch::nn::Module walks the module into one of these; every later step sees
// only this list, so a model need not be a LibTorch module to be trained.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace zerotrain::engine {

struct ModelTensors {
  struct Param {
    std::string name;   // dotted, as named_parameters() spells it; checkpoints record it
    at::Tensor tensor;  // the model's own tensor: the engine re-points its data (set_data)
    int submodule = 0;  // stage 3 gathers the parameters of one submodule together
  };
  // Registration order, each tensor once (one that two submodules share, like tied embeddings,
  // under the first name and submodule it has), requires_grad set.
  std::vector<Param> trainable;
  std::vector<at::Tensor> frozen;   // parameters without requires_grad, in registration order
  std::vector<at::Tensor> buffers;  // in registration order
};

// A LibTorch module's tensors, submodules numbered in the order Module::apply visits them.
ModelTensors TensorsOf(torch::nn::Module& module);

}  // namespace zerotrain::engine
