// SubmoduleHook: how a model family hands each submodule it builds to ZeRO stage 3's partitioned
// construction. torch::nn::Module is only declared here, so the option structs that carry a hook
// (gpt_options.h, llama_options.h, resnet_options.h) stay free of LibTorch's module headers.
#pragma once

#include <functional>
#include <string>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace zerotrain::models {

// Called with each submodule right after the model builds and initialises it, and its name in
// the model ("h.0", "model.layers.3"): ZeRO stage 3's partitioned construction
// (partition/sharded_init.h) partitions it there, after filling it from a checkpoint by name.
using SubmoduleHook = std::function<void(const std::string& name, torch::nn::Module& submodule)>;

}  // namespace zerotrain::models
