// CheckpointBlock under the ZeRO Engine: the parameters' post-accumulate-grad hooks, through
// which the GradientReducer collects and reduces gradients, fire inside the reentrant backward
// of each recomputed block. Training a model whose blocks are checkpointed must end with exactly
// the parameters (fp32, bitwise) of the same model trained without checkpointing, on 1 and 2
// ranks, with dropout, overlapping reductions and buckets smaller than a block; at stage 3 the
// recomputation gathers the blocks' parameters again inside backward.
#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "recompute/activation_checkpoint.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

constexpr int64_t kDim = 16, kHidden = 48, kBatch = 8;
constexpr int kBlocks = 3, kSteps = 6;

struct Net : torch::nn::Module {
  explicit Net(bool checkpointed) : checkpointed(checkpointed) {
    torch::manual_seed(0);
    for (int i = 0; i < kBlocks; ++i) {
      fc1.push_back(register_module(absl::StrCat("fc1_", i), torch::nn::Linear(kDim, kHidden)));
      fc2.push_back(register_module(absl::StrCat("fc2_", i), torch::nn::Linear(kHidden, kDim)));
    }
    head = register_module("head", torch::nn::Linear(kDim, 1));
  }
  torch::Tensor Block(int i, const torch::Tensor& x) {
    return x + fc2[i](torch::dropout(torch::gelu(fc1[i](x)), 0.1, is_training()));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x;
    for (int i = 0; i < kBlocks; ++i) {
      auto fn = [this, i](const torch::Tensor& t) { return Block(i, t); };
      h = checkpointed ? recompute::CheckpointBlock(fn, h) : fn(h);
    }
    return head(h);
  }
  bool checkpointed;
  std::vector<torch::nn::Linear> fc1, fc2;
  torch::nn::Linear head{nullptr};
};

// Trains `net` for kSteps; each rank draws its own micro-batch and dropout masks from seeds that
// depend only on (rank, step), so the two runs see the same data and masks. Returns copies of the
// trained parameters (gathered at stage 3, whose engine must still exist to read them).
absl::StatusOr<std::vector<torch::Tensor>> Train(Net& net, int stage, comm::ProcessGroup* group) {
  engine::EngineOptions o;
  o.stage = stage;
  o.train_micro_batch_size_per_gpu = kBatch;
  o.reduce_bucket_size = 100;  // elements: several buckets per block, reduced during backward
  o.allgather_bucket_size = 100;
  o.stage3.persistence_threshold = 0;
  ZT_ASSIGN_OR_RETURN(auto engine, engine::Engine::Create(net, o, group));
  for (int step = 0; step < kSteps; ++step) {
    torch::manual_seed(1000 * group->rank() + step);
    torch::Tensor x = torch::randn({kBatch, kDim});
    torch::Tensor y = x.sum(-1, true).sin();
    torch::Tensor loss;
    {
      auto forward = engine->BeginForward();
      loss = torch::mse_loss(net.forward(x), y);
    }
    ZT_RETURN_IF_ERROR(engine->Backward(loss));
    ZT_RETURN_IF_ERROR(engine->Step());
  }
  ZT_ASSIGN_OR_RETURN(auto gathered, engine->GatherParameters(net.parameters()));
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : net.parameters()) out.push_back(p.detach().clone());
  ZT_RETURN_IF_ERROR(gathered->Close());
  return out;
}

absl::StatusOr<std::string> CompareOnRank(int stage) {
  auto info = comm::RendezvousFromEnv();
  if (!info.ok()) return info.status();
  ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(*info, {}));
  Net plain(false), checkpointed(true);
  ZT_ASSIGN_OR_RETURN(const auto want, Train(plain, stage, group.get()));
  ZT_ASSIGN_OR_RETURN(const auto got, Train(checkpointed, stage, group.get()));
  const auto names = Net(false).named_parameters().keys();
  for (size_t i = 0; i < want.size(); ++i) {
    if (!torch::equal(want[i], got[i])) {
      return absl::InternalError(absl::StrCat("parameter ", names[i], " differs by ",
                                              (want[i] - got[i]).abs().max().item<double>()));
    }
  }
  // The models must have trained: equal but untouched parameters would pass the loop above.
  Net initial(false);
  if (torch::equal(initial.fc1[0]->weight, want[0])) {
    return absl::InternalError("fc1_0.weight did not change");
  }
  return std::string("ok");
}

void ExpectAllRanksOk(int world, int stage) {
  auto outcomes = testing::SpawnRanks(world, [stage](int) { return CompareOnRank(stage); });
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(world));
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << testing::FormatOutcomes(outcomes);
}

// A parameter used by two checkpointed blocks gets its gradient in two pieces (one per nested
// backward): the engine refuses it by name instead of reducing only one piece.
TEST(CheckpointEngineTest, ParameterSharedByTwoCheckpointedBlocksIsAnError) {
  auto outcomes = testing::SpawnRanks(1, [](int) -> absl::StatusOr<std::string> {
    auto info = comm::RendezvousFromEnv();
    if (!info.ok()) return info.status();
    ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(*info, {}));
    torch::nn::Linear shared(kDim, kDim);
    engine::EngineOptions o;
    o.train_micro_batch_size_per_gpu = kBatch;
    ZT_ASSIGN_OR_RETURN(auto engine, engine::Engine::Create(*shared, o, group.get()));
    auto block = [&](const torch::Tensor& t) { return torch::tanh(shared(t)); };
    torch::Tensor h = recompute::CheckpointBlock(
        block, recompute::CheckpointBlock(block, torch::randn({kBatch, kDim})));
    const absl::Status s = engine->Backward(h.pow(2).mean());
    if (s.code() != absl::StatusCode::kFailedPrecondition ||
        s.message().find("arrived in more than one piece") == absl::string_view::npos ||
        (s.message().find("'weight'") == absl::string_view::npos &&
         s.message().find("'bias'") == absl::string_view::npos)) {
      return absl::InternalError(
          absl::StrCat("wanted the shared-parameter error, got ", s.ToString()));
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << testing::FormatOutcomes(outcomes);
}

TEST(CheckpointEngineTest, Stage2TwoRanksMatchesUncheckpointed) { ExpectAllRanksOk(2, 2); }
TEST(CheckpointEngineTest, Stage1OneRankMatchesUncheckpointed) { ExpectAllRanksOk(1, 1); }
TEST(CheckpointEngineTest, Stage3TwoRanksMatchesUncheckpointed) { ExpectAllRanksOk(2, 3); }

}  // namespace
}  // namespace zerotrain::engine
