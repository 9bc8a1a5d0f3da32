// ResNet-18 through the Engine on 2 ranks at every ZeRO stage (0-3), its residual blocks recomputed
// in backward, conv1 frozen: after 3 SGD steps every parameter equals a plain single-process
// LibTorch loop's that runs both ranks' micro-batches (each a BatchNorm batch of its own, as on
// the ranks) and averages their gradients; the frozen weights never move. Mixed parameter shapes
// (4-d convolutions, 1-d BatchNorm, 2-d fc) and BatchNorm buffers ride along.
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "models/resnet.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::trainer {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kMicro = 2;
constexpr double kLr = 0.05;

std::shared_ptr<models::ResNet> Build() {
  models::ResNetOptions o;
  o.num_classes = 10;
  o.checkpoint_every = 1;
  torch::manual_seed(0);
  auto model = std::make_shared<models::ResNet>(o);
  for (auto& p : model->named_parameters()) {
    if (p.key() == "conv1.weight") p.value().set_requires_grad(false);
  }
  return model;
}

// Step s's batch: both ranks' micro-batches, rank r's the rows [r * kMicro, (r + 1) * kMicro).
std::pair<at::Tensor, at::Tensor> Batch(int step) {
  torch::manual_seed(100 + step);
  return {torch::randn({2 * kMicro, 3, 32, 32}), torch::randint(0, 10, {2 * kMicro}, torch::kLong)};
}

// The plain loop: each micro-batch's loss / 2 (the ranks' mean), one SGD step.
std::map<std::string, at::Tensor> Reference() {
  std::shared_ptr<models::ResNet> model = Build();
  model->train();
  std::vector<at::Tensor> trainable;
  for (auto& p : model->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  torch::optim::SGD sgd(trainable, torch::optim::SGDOptions(kLr));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = Batch(step);
    sgd.zero_grad();
    for (int r = 0; r < 2; ++r) {
      const auto rows = torch::indexing::Slice(r * kMicro, (r + 1) * kMicro);
      (torch::cross_entropy_loss(model->forward(x.index({rows})), y.index({rows})) / 2).backward();
    }
    sgd.step();
  }
  std::map<std::string, at::Tensor> params;
  for (auto& p : model->named_parameters()) params[p.key()] = p.value().detach().clone();
  return params;
}

absl::StatusOr<std::string> TrainRank(int rank, int stage) {
  ZT_ASSIGN_OR_RETURN(auto info, comm::RendezvousFromEnv());
  ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(info, {}));
  std::shared_ptr<models::ResNet> model = Build();
  const at::Tensor frozen = model->named_parameters()["conv1.weight"].detach().clone();
  engine::EngineOptions o;
  o.stage = stage;
  o.train_micro_batch_size_per_gpu = kMicro;
  o.gradient_accumulation_steps = 1;
  o.optimizer = engine::OptimizerKind::kSgd;
  o.sgd.lr = kLr;
  ZT_ASSIGN_OR_RETURN(auto engine, engine::Engine::Create(*model, o, group.get()));
  model->train();
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = Batch(step);
    const auto rows = torch::indexing::Slice(rank * kMicro, (rank + 1) * kMicro);
    at::Tensor loss;
    {
      auto forward = engine->BeginForward();  // stage 3 gathers parameters inside it
      loss = torch::cross_entropy_loss(model->forward(x.index({rows})), y.index({rows}));
    }
    ZT_RETURN_IF_ERROR(engine->Backward(loss));
    ZT_RETURN_IF_ERROR(engine->Step());
  }
  const std::map<std::string, at::Tensor> want = Reference();
  std::vector<at::Tensor> trainable;
  for (auto& p : model->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  ZT_ASSIGN_OR_RETURN(auto gathered, engine->GatherParameters(trainable));
  double worst = 0;
  std::string where = "(none)";
  for (auto& p : model->named_parameters()) {
    const double d = (p.value().detach() - want.at(p.key())).abs().max().item<double>();
    if (d > worst) worst = d, where = p.key();
  }
  const bool still = torch::equal(model->named_parameters()["conv1.weight"].detach(), frozen);
  const double moved =
      (want.at("fc.weight") - Build()->named_parameters()["fc.weight"]).abs().max().item<double>();
  ZT_RETURN_IF_ERROR(gathered->Close());
  return absl::StrCat(worst, " ", where, " ", still ? "frozen" : "MOVED", " ", moved);
}

void ExpectLikeTheReference(int stage) {
  testing::SpawnOptions so;
  so.deadline = std::chrono::seconds(300);
  for (const auto& out : testing::SpawnRanks(
           2, [stage](int r) { return TrainRank(r, stage); }, so)) {
    ASSERT_TRUE(out.status.ok()) << "rank " << out.rank << ": " << out.status;
    std::istringstream in(out.payload);
    double worst, moved;
    std::string where, frozen;
    in >> worst >> where >> frozen >> moved;
    EXPECT_LT(worst, 1e-5) << "rank " << out.rank << ", largest difference at " << where;
    EXPECT_EQ(frozen, "frozen") << "rank " << out.rank;
    EXPECT_GT(moved, 1e-3) << "the reference's weights should have moved";
  }
}

TEST(ResNetEngineTest, Stage0WithRecomputationMatchesThePlainLoop) { ExpectLikeTheReference(0); }

TEST(ResNetEngineTest, Stage1WithRecomputationMatchesThePlainLoop) { ExpectLikeTheReference(1); }

TEST(ResNetEngineTest, Stage2WithRecomputationMatchesThePlainLoop) { ExpectLikeTheReference(2); }

TEST(ResNetEngineTest, Stage3WithRecomputationMatchesThePlainLoop) { ExpectLikeTheReference(3); }

}  // namespace
}  // namespace zerotrain::trainer
