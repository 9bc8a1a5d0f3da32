// CompareRuns and the MLP of recompute/checkpoint_testing.h.
#include "recompute/checkpoint_testing.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

namespace zerotrain::recompute::testing {

Mlp::Mlp(int64_t dim, int64_t hidden, double p)
    : fc1(register_module("fc1", torch::nn::Linear(dim, hidden))),
      fc2(register_module("fc2", torch::nn::Linear(hidden, dim))),
      drop(register_module("drop", torch::nn::Dropout(p))) {}

at::Tensor Mlp::forward(const at::Tensor& x) { return x + fc2(drop(torch::gelu(fc1(x)))); }

Grads Collect(torch::nn::Module& m, const std::vector<at::Tensor>& inputs) {
  auto copy = [](const torch::Tensor& g) { return g.defined() ? g.clone() : g; };
  Grads g;
  for (const auto& p : m.parameters()) g.push_back(copy(p.grad()));
  for (const auto& x : inputs) g.push_back(copy(x.grad()));
  return g;
}

void Clear(torch::nn::Module& m, const std::vector<at::Tensor>& inputs) {
  for (auto p : m.parameters()) p.mutable_grad() = torch::Tensor();
  for (auto x : inputs) x.mutable_grad() = torch::Tensor();
}

void ExpectBitwiseEqual(const Grads& want, const Grads& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].defined(), got[i].defined()) << "gradient " << i;
    if (!want[i].defined()) continue;
    ASSERT_EQ(want[i].scalar_type(), got[i].scalar_type()) << "gradient " << i;
    ASSERT_EQ(want[i].device(), got[i].device()) << "gradient " << i;
    EXPECT_TRUE(torch::equal(want[i], got[i]))
        << "gradient " << i << " differs by " << (want[i] - got[i]).abs().max().item<double>();
    EXPECT_GT(want[i].abs().sum().item<double>(), 0) << "gradient " << i << " is all zero";
  }
}

at::Tensor Weights(const at::Tensor& y) {
  return torch::linspace(-1, 1, y.numel(), y.options()).view(y.sizes());
}

namespace {

// One run: seed, forward, `between`, backward; the gradients, then each device's next draw.
Grads Run(torch::nn::Module& m, const std::vector<at::Tensor>& inputs, const LossFn& loss_fn,
          const CompareOptions& options, uint64_t seed, std::vector<float>* next) {
  Clear(m, inputs);
  torch::manual_seed(seed);
  at::Tensor loss = loss_fn();
  if (options.between) options.between();
  loss.backward();
  Grads g = Collect(m, inputs);
  for (const c10::Device& d : options.rng_devices) {
    next->push_back(torch::rand({1}, torch::TensorOptions().device(d)).item<float>());
  }
  return g;
}

}  // namespace

void CompareRuns(torch::nn::Module& m, const std::vector<at::Tensor>& inputs, const LossFn& plain,
                 const LossFn& checkpointed, const CompareOptions& options) {
  std::vector<float> next_want, next_got;
  Grads want = Run(m, inputs, plain, options, 7, &next_want);
  Grads got = Run(m, inputs, checkpointed, options, 7, &next_got);
  ExpectBitwiseEqual(want, got);
  for (size_t i = 0; i < options.rng_devices.size(); ++i) {
    EXPECT_EQ(next_want[i], next_got[i])
        << "recomputation moved the random stream of " << options.rng_devices[i];
  }
}

void ExpectSeedMatters(torch::nn::Module& m, const std::vector<at::Tensor>& inputs,
                       const LossFn& loss) {
  std::vector<float> unused;
  Grads a = Run(m, inputs, loss, {}, 7, &unused);
  Grads b = Run(m, inputs, loss, {}, 8, &unused);
  ASSERT_EQ(a.size(), b.size());
  bool differ = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() && !torch::equal(a[i], b[i])) differ = true;
  }
  EXPECT_TRUE(differ) << "the gradients do not depend on the seed: dropout is not exercised";
}

}  // namespace zerotrain::recompute::testing
