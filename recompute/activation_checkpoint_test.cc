// CheckpointBlock against the plain LibTorch computation it replaces: the same seed before both
// runs, then the gradients of every parameter and input must match bit for bit (fp32 and bf16),
// with dropout on; plus the CPU allocator's live bytes after forward, which must drop. The CUDA
// cases are in activation_checkpoint_cuda_test.cc.
#include "recompute/activation_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/transformerlayer.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "recompute/allocation_counter.h"
#include "recompute/checkpoint_testing.h"

namespace zerotrain::recompute {
namespace {

using testing::CompareOptions;
using testing::CompareRuns;
using testing::Mlp;
using testing::Weights;

TEST(CheckpointBlockTest, MlpWithDropoutMatchesBitwise) {
  for (bool input_grad : {true, false}) {
    for (bool on_host : {false, true}) {
      SCOPED_TRACE(std::string("input_grad=") + (input_grad ? "1" : "0") +
                   " cpu_checkpointing=" + (on_host ? "1" : "0"));
      torch::manual_seed(1);
      Mlp mlp(16, 64, 0.2);
      torch::Tensor x = torch::randn({8, 16}).requires_grad_(input_grad);
      ActivationCheckpointOptions opts;
      opts.cpu_checkpointing = on_host;
      auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
      CompareRuns(
          mlp, {x}, [&] { return (mlp.forward(x) * Weights(x)).sum(); },
          [&] { return (CheckpointBlock(fn, x, opts) * Weights(x)).sum(); });
    }
  }
}

// Random numbers drawn between forward and backward (another block's dropout, a sampler) must
// neither reach the recomputation nor be replayed after it: the rerun uses forward's CPU state,
// and the stream continues after the caller's draws.
TEST(CheckpointBlockTest, DrawsBetweenForwardAndBackwardDoNotReachTheRerun) {
  torch::manual_seed(1);
  Mlp mlp(16, 64, 0.3);
  torch::Tensor x = torch::randn({8, 16}).requires_grad_(true);
  auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
  auto plain = [&] { return (mlp.forward(x) * Weights(x)).sum(); };
  testing::ExpectSeedMatters(mlp, {x}, plain);
  CompareOptions opts;
  opts.between = [] { torch::rand({100}); };
  CompareRuns(
      mlp, {x}, plain, [&] { return (CheckpointBlock(fn, x) * Weights(x)).sum(); }, opts);
}

TEST(CheckpointBlockTest, Bf16ParametersMatchBitwise) {
  torch::manual_seed(2);
  Mlp mlp(16, 64, 0.1);
  mlp.to(torch::kBFloat16);
  torch::Tensor x = torch::randn({8, 16}).to(torch::kBFloat16).requires_grad_(true);
  auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
  CompareRuns(
      mlp, {x}, [&] { return (mlp.forward(x).to(torch::kFloat) * 0.5).sum(); },
      [&] { return (CheckpointBlock(fn, x).to(torch::kFloat) * 0.5).sum(); });
}

torch::nn::TransformerEncoderLayer MakeLayer() {
  return torch::nn::TransformerEncoderLayer(
      torch::nn::TransformerEncoderLayerOptions(32, 4).dim_feedforward(64).dropout(0.1));
}

TEST(CheckpointBlockTest, TransformerStackMatchesBitwise) {
  for (bool input_grad : {true, false}) {
    SCOPED_TRACE(input_grad ? "input requires grad" : "input without grad");
    torch::manual_seed(3);
    torch::nn::Module stack;
    std::vector<torch::nn::TransformerEncoderLayer> layers;
    for (int i = 0; i < 3; ++i) {
      layers.push_back(stack.register_module("layer" + std::to_string(i), MakeLayer()));
    }
    torch::Tensor x = torch::randn({6, 2, 32}).requires_grad_(input_grad);
    auto run = [&](bool checkpointed) {
      torch::Tensor h = x;
      for (auto& layer : layers) {
        auto fn = [&](const torch::Tensor& t) { return layer->forward(t); };
        h = checkpointed ? CheckpointBlock(fn, h) : fn(h);
      }
      return (h * Weights(h)).sum();
    };
    CompareRuns(
        stack, {x}, [&] { return run(false); }, [&] { return run(true); });
  }
}

// Token ids (int64, no grad) and a float input; a second output no loss uses (an undefined
// incoming gradient), an int64 output, and outputs that are views of an input and of a result.
struct TokenBlock : torch::nn::Module {
  TokenBlock()
      : emb(register_module("emb", torch::nn::Embedding(50, 16))),
        mlp(register_module("mlp", std::make_shared<Mlp>(16, 32, 0.25))) {}
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& in) {
    torch::Tensor h = mlp->forward(emb(in[0]) + in[1]);
    return {h.transpose(0, 1), h.sum(-1), in[0] + 1, in[1].narrow(1, 0, 2)};
  }
  torch::nn::Embedding emb;
  std::shared_ptr<Mlp> mlp;
};

TEST(CheckpointBlockTest, MixedInputsAndOutputs) {
  torch::manual_seed(4);
  TokenBlock block;
  torch::Tensor ids = torch::randint(50, {4, 5}, torch::kLong);
  torch::Tensor x = torch::randn({4, 5, 16}).requires_grad_(true);
  auto loss = [&](const std::vector<torch::Tensor>& out) {
    EXPECT_EQ(out[2].scalar_type(), torch::kLong);
    EXPECT_FALSE(out[2].requires_grad());
    return (out[0] * Weights(out[0])).sum() + (out[3] * 3).sum();  // out[1] unused
  };
  Block fn = [&](const std::vector<torch::Tensor>& in) { return block.forward(in); };
  CompareRuns(
      block, {ids, x},
      [&] {
        return loss(fn({ids, x}));
      },
      [&] {
        return loss(CheckpointBlock(fn, {ids, x}));
      });
}

TEST(CheckpointBlockTest, ProfileCountsRecomputations) {
  Mlp mlp(8, 8, 0.0);
  auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
  ResetRecomputeStats();
  CheckpointBlock(fn, torch::randn({2, 8})).sum().backward();
  EXPECT_EQ(GetRecomputeStats().recomputations, 0);
  ActivationCheckpointOptions opts;
  opts.profile = true;
  for (int i = 0; i < 3; ++i) CheckpointBlock(fn, torch::randn({2, 8}), opts).sum().backward();
  RecomputeStats s = GetRecomputeStats();
  EXPECT_EQ(s.recomputations, 3);
  EXPECT_GT(s.seconds, 0);
  ResetRecomputeStats();
  EXPECT_EQ(GetRecomputeStats().recomputations, 0);
}

TEST(CheckpointBlockTest, BlockErrorSurfacesFromBackwardAndRestoresRng) {
  Mlp mlp(8, 8, 0.0);
  bool fail = false;
  auto fn = [&](const torch::Tensor& t) {
    if (fail) throw std::runtime_error("block failed on purpose");
    return mlp.forward(t);
  };
  torch::Tensor loss = CheckpointBlock(fn, torch::randn({2, 8}).requires_grad_(true)).sum();
  fail = true;
  torch::manual_seed(11);
  float want = torch::rand({1}).item<float>();
  torch::manual_seed(11);
  try {
    loss.backward();
    ADD_FAILURE() << "backward did not throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("block failed on purpose"), std::string::npos) << e.what();
  }
  EXPECT_EQ(torch::rand({1}).item<float>(), want);
}

TEST(CheckpointBlockTest, InPlaceChangeOfSavedInputIsReported) {
  Mlp mlp(8, 8, 0.0);
  auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
  torch::Tensor x = torch::randn({2, 8}).requires_grad_(true);
  torch::Tensor h = x * 2;
  torch::Tensor loss = CheckpointBlock(fn, h).sum();
  {
    torch::NoGradGuard no_grad;
    h.add_(1);
  }
  EXPECT_THROW(loss.backward(), c10::Error);
}

TEST(CheckpointBlockTest, DoubleBackwardIsRefused) {
  Mlp mlp(8, 8, 0.0);
  auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
  torch::Tensor x = torch::randn({2, 8}).requires_grad_(true);
  torch::Tensor loss = CheckpointBlock(fn, x).sum();
  EXPECT_THROW(torch::autograd::grad({loss}, {x}, {}, true, /*create_graph=*/true), c10::Error);
}

// Live CPU bytes after forward of an L-block MLP stack (batch B, width D, hidden H). Plainly,
// each block keeps at least two B x H fp32 tensors for backward (GELU's input and fc2's input;
// dropout's mask adds more); checkpointed, each keeps only its B x D input plus an RNG state.
TEST(CheckpointBlockTest, SavedActivationBytesDrop) {
  constexpr int64_t L = 8, B = 64, D = 64, H = 512;
  torch::manual_seed(5);
  std::vector<std::shared_ptr<Mlp>> blocks;
  for (int i = 0; i < L; ++i) blocks.push_back(std::make_shared<Mlp>(D, H, 0.1));
  torch::Tensor x = torch::randn({B, D}).requires_grad_(true);
  auto live_after_forward = [&](bool checkpointed) {
    AllocationCounter counter;
    torch::Tensor h = x;
    for (auto& b : blocks) {
      auto fn = [b](const torch::Tensor& t) { return b->forward(t); };
      h = checkpointed ? CheckpointBlock(fn, h) : fn(h);
    }
    torch::Tensor loss = h.sum();
    int64_t live = counter.live_bytes();
    loss.backward();
    return live;
  };
  int64_t plain = live_after_forward(false);
  int64_t checkpointed = live_after_forward(true);
  const int64_t row = B * D * 4, wide = B * H * 4, rng_state = 8 << 10;
  EXPECT_GE(plain, L * 2 * wide);
  EXPECT_LE(checkpointed, L * (row + rng_state) + row + 4096);
  EXPECT_LT(checkpointed * 4, plain) << "plain " << plain << " checkpointed " << checkpointed;
}

}  // namespace
}  // namespace zerotrain::recompute
