// ModelTensors: a LibTorch module's walk (a shared tensor once, frozen parameters and buffers
// apart), and an Engine built from tensors that belong to no module (as python/'s binding builds
// one), whose forward is plain functions of them: at stages 0 and 3 on 2 ranks, and at stage 3
// partitioned as built through ZeroInit::PartitionOwn, its parameters after 20 steps match the
// single-process AdamW reference of the same MLP, and bf16 casts the
// floating-point tensors in place while an integer buffer keeps its type.
#include "engine/model_tensors.h"

#include <torch/nn/functional/loss.h>
#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "engine/zero_init.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;
using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

TEST(TensorsOf, ListsASharedTensorOnceAndKeepsFrozenAndBuffersApart) {
  auto net = testing::MakeNet(ModelKind::kTied);
  auto mlp = testing::MakeNet(ModelKind::kMlp);
  mlp->named_parameters()["fc1.bias"].set_requires_grad(false);
  mlp->register_buffer("counter", torch::zeros({2}, torch::kLong));
  const ModelTensors tied = TensorsOf(*net);
  EXPECT_EQ(tied.trainable.size(), testing::UniqueParameters(*net).size());
  const ModelTensors m = TensorsOf(*mlp);
  ASSERT_EQ(m.trainable.size(), 3u);
  EXPECT_EQ(m.trainable[0].name, "fc1.weight");
  EXPECT_EQ(m.trainable[1].name, "fc2.weight");
  EXPECT_EQ(m.trainable[2].name, "fc2.bias");
  EXPECT_LT(m.trainable[0].submodule, m.trainable[1].submodule);
  EXPECT_EQ(m.trainable[1].submodule, m.trainable[2].submodule);
  ASSERT_EQ(m.frozen.size(), 1u);
  EXPECT_TRUE(m.frozen[0].is_same(mlp->named_parameters()["fc1.bias"]));
  ASSERT_EQ(m.buffers.size(), 1u);
  EXPECT_EQ(m.buffers[0].scalar_type(), torch::kLong);
}

// The MLP of test_models (fc2(tanh(fc1(x)))) as four tensors and a function of them.
struct LooseMlp {
  torch::Tensor w1, b1, w2, b2;
  torch::Tensor Forward(const torch::Tensor& x) const {
    return torch::linear(torch::tanh(torch::linear(x, w1, b1)), w2, b2);
  }
};

LooseMlp FromModule(testing::TestNet& net) {
  auto p = net.named_parameters();
  auto leaf = [&](const char* name) { return p[name].detach().clone().requires_grad_(true); };
  return {leaf("fc1.weight"), leaf("fc1.bias"), leaf("fc2.weight"), leaf("fc2.bias")};
}

ModelTensors AsModelTensors(const LooseMlp& m) {
  ModelTensors t;
  t.trainable = {{"fc1.weight", m.w1, 0},
                 {"fc1.bias", m.b1, 0},
                 {"fc2.weight", m.w2, 1},
                 {"fc2.bias", m.b2, 1}};
  return t;
}

// Stage 0 and 3 from whole tensors; stage 3 also partitioned as it is built (ZeroInit given each
// "module"'s own tensors, as python/'s zero.Init does), which leaves them empty until gathered.
struct LooseCase {
  int stage;
  bool zero_init;
};

class LooseModel : public ::testing::TestWithParam<LooseCase> {};

TEST_P(LooseModel, TrainsAsTheReferenceModule) {
  const LooseCase c = GetParam();
  auto outcomes = SpawnRanks(2, [c](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    testing::ReferenceOptions ref;
    EngineOptions o;
    o.stage = c.stage;
    o.train_batch_size = 2 * ref.batch;  // each rank trains on the whole global batch
    o.adam.lr = ref.lr;
    o.adam.weight_decay = ref.weight_decay;
    o.stage3.persistence_threshold = 0;
    auto module = testing::MakeNet(ModelKind::kMlp);
    const LooseMlp mlp = FromModule(*module);
    std::unique_ptr<ZeroInit> init;
    if (c.zero_init) {
      ZT_ASSIGN_OR_RETURN(init, ZeroInit::Create(group.get(), &o));
      ZT_RETURN_IF_ERROR(init->PartitionOwn("fc1", {mlp.w1, mlp.b1}));
      ZT_RETURN_IF_ERROR(init->PartitionOwn("fc2", {mlp.w2, mlp.b2}));
      if (mlp.w1.numel() != 0 || mlp.b2.numel() != 0) {
        return absl::InternalError("ZeroInit left a parameter whole");
      }
    }
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(AsModelTensors(mlp), o, group.get()));
    for (int step = 0; step < ref.steps; ++step) {
      testing::Batch b = testing::GlobalBatch(ModelKind::kMlp, step, ref.batch);
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = torch::nn::functional::mse_loss(mlp.Forward(b.x), b.y);
      }
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      ZT_RETURN_IF_ERROR(engine->Step());
    }
    testing::ReferenceRun want = testing::RunReference(ModelKind::kMlp, ref);
    ZT_ASSIGN_OR_RETURN(auto gathered, engine->GatherParameters({mlp.w1, mlp.b1, mlp.w2, mlp.b2}));
    auto* net = module.get();
    torch::NoGradGuard no_grad;
    auto p = net->named_parameters();
    p["fc1.weight"].copy_(mlp.w1);
    p["fc1.bias"].copy_(mlp.b1);
    p["fc2.weight"].copy_(mlp.w2);
    p["fc2.bias"].copy_(mlp.b2);
    ZT_RETURN_IF_ERROR(gathered->Close());
    const std::string diff = testing::CompareParams(*net, *want.net, 1e-6, 1e-5);
    if (!diff.empty()) return absl::InternalError(absl::StrCat("rank ", rank, ": ", diff));
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Stages, LooseModel,
                         ::testing::Values(LooseCase{0, false}, LooseCase{3, false},
                                           LooseCase{3, true}),
                         [](const auto& info) {
                           return absl::StrCat("stage", info.param.stage,
                                               info.param.zero_init ? "_zero_init" : "");
                         });

TEST(LooseModel, Bf16CastsFloatingTensorsInPlaceAndKeepsIntegerOnes) {
  auto outcomes = SpawnRanks(1, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    EngineOptions o;
    o.stage = 2;
    o.train_batch_size = 4;
    o.precision = Precision::kBFloat16;
    auto module = testing::MakeNet(ModelKind::kMlp);
    const LooseMlp mlp = FromModule(*module);
    ModelTensors t = AsModelTensors(mlp);
    const torch::Tensor frozen = torch::ones({3});
    const torch::Tensor steps = torch::zeros({1}, torch::kLong);
    t.frozen = {frozen};
    t.buffers = {steps};
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(t, o, group.get()));
    return absl::StrCat(c10::toString(mlp.w1.scalar_type()), " ",
                        c10::toString(frozen.scalar_type()), " ",
                        c10::toString(steps.scalar_type()));
  });
  ASSERT_TRUE(outcomes[0].status.ok()) << FormatOutcomes(outcomes);
  EXPECT_EQ(outcomes[0].payload, "BFloat16 BFloat16 Long");
}

}  // namespace
}  // namespace zerotrain::engine
