// Helpers shared by recompute/'s CPU and CUDA tests: a small MLP with dropout and CompareRuns,
// which runs a loss plainly and through CheckpointBlock from the same seed and requires the same
// gradients bit for bit and the same random streams afterwards.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace zerotrain::recompute::testing {

// x + fc2(dropout(gelu(fc1(x)))): dropout makes a recomputation with the wrong RNG state visible.
struct Mlp : torch::nn::Module {
  Mlp(int64_t dim, int64_t hidden, double p);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Linear fc1, fc2;
  torch::nn::Dropout drop;
};

using Grads = std::vector<at::Tensor>;

// Parameter gradients in registration order, then the inputs' (undefined where none).
Grads Collect(torch::nn::Module& m, const std::vector<at::Tensor>& inputs);
void Clear(torch::nn::Module& m, const std::vector<at::Tensor>& inputs);
// Same definedness, dtype and values; a gradient that is all zero fails too (it would prove
// nothing).
void ExpectBitwiseEqual(const Grads& want, const Grads& got);
// -1..1 over y's elements, in y's shape: a loss that weights every element differently.
at::Tensor Weights(const at::Tensor& y);

using LossFn = std::function<at::Tensor()>;

struct CompareOptions {
  // Generators whose next draw after backward must be the one without checkpointing.
  std::vector<c10::Device> rng_devices = {c10::Device(c10::kCPU)};
  // Runs between forward and backward in both runs (e.g. draws random numbers, so the
  // recomputation must use forward's RNG states, not the current ones).
  std::function<void()> between;
};

// Builds the loss with `plain` and with `checkpointed`, each after torch::manual_seed(7) (every
// device), runs options.between, then backward; compares the gradients of m's parameters and of
// `inputs`, and the next draw of each of options.rng_devices.
void CompareRuns(torch::nn::Module& m, const std::vector<at::Tensor>& inputs, const LossFn& plain,
                 const LossFn& checkpointed, const CompareOptions& options = {});

// The gradients `loss` gives after seeds 7 and 8 differ: the random masks matter, so equal
// gradients in CompareRuns mean the recomputation drew the same ones.
void ExpectSeedMatters(torch::nn::Module& m, const std::vector<at::Tensor>& inputs,
                       const LossFn& loss);

}  // namespace zerotrain::recompute::testing
