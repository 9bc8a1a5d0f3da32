// Adagrad and LAMB through the Engine on 2 ranks: ZeRO stages 0-3, offload_optimizer cpu and nvme
// and clipping, with buckets and sub-groups that cut tensors across ranks and sub-groups, end after
// 10 steps with the parameters of an independent single-process reference: torch::optim::Adagrad,
// and for LAMB optim's double-precision loop of DeepSpeed FusedLamb's maths (lamb_reference.h),
// which takes each trust ratio from the whole tensor. A LAMB that took it per shard, or missed the
// other rank's part, would not match.
#include <torch/optim.h>
#include <torch/types.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "optim/lamb_reference.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;

constexpr int kWorld = 2;
constexpr int kSteps = 10;
constexpr int64_t kBatch = 8;
constexpr ModelKind kModel = ModelKind::kTransformer;
constexpr double kInitialAccumulator = 0.1;

struct Case {
  OptimizerKind optimizer;
  int stage;
  OffloadDevice offload = OffloadDevice::kNone;
  double clip = 0;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(OptimizerKindName(c.optimizer), "_stage", c.stage, "_offload_",
                      OffloadDeviceName(c.offload), c.clip > 0 ? "_clip" : "");
}

optim::AdagradOptions TestAdagrad() {
  optim::AdagradOptions o;
  o.lr = 1e-2;
  o.lr_decay = 0.01;
  o.weight_decay = 0.01;
  return o;
}

optim::LambOptions TestLamb() {
  optim::LambOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  return o;
}

testing::ReferenceStep TorchAdagrad(const std::vector<torch::Tensor>& params) {
  const optim::AdagradOptions o = TestAdagrad();
  auto adagrad = std::make_shared<torch::optim::Adagrad>(
      params, torch::optim::AdagradOptions(o.lr)
                  .lr_decay(o.lr_decay)
                  .weight_decay(o.weight_decay)
                  .initial_accumulator_value(kInitialAccumulator)
                  .eps(o.eps));
  return [adagrad] { adagrad->step(); };
}

// The parameters one after another, as float.
std::vector<float> Flatten(const std::vector<torch::Tensor>& tensors) {
  std::vector<float> out;
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor f = t.detach().to(torch::kFloat).reshape({-1}).contiguous();
    out.insert(out.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  return out;
}

// ReferenceLamb keeps the weights in double; the net gets them rounded after every step.
testing::ReferenceStep FusedLambReference(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> sizes;
  for (const torch::Tensor& p : params) sizes.push_back(p.numel());
  auto lamb = std::make_shared<optim::testing::ReferenceLamb>(Flatten(params), sizes);
  auto step = std::make_shared<int64_t>(0);
  return [params, lamb, step] {
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : params) grads.push_back(p.grad());
    lamb->Step(TestLamb(), ++*step, Flatten(grads));
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (const torch::Tensor& p : params) {
      const torch::Tensor values =
          torch::from_blob(lamb->p.data() + offset, {p.numel()}, torch::kDouble);
      p.copy_(values.to(torch::kFloat).view(p.sizes()));
      offset += p.numel();
    }
  };
}

absl::StatusOr<std::string> TrainAndCompare(const Case& c) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(kModel);
  EngineOptions o;
  o.stage = c.stage;
  o.train_micro_batch_size_per_gpu = kBatch;  // every rank trains on the whole batch
  o.gradient_clipping = c.clip;
  o.reduce_bucket_size = 64;  // below the largest parameter: tensors are cut across ranks
  o.allgather_bucket_size = 64;
  o.sub_group_size = 37;  // and across sub-groups
  o.optimizer = c.optimizer;
  o.adagrad = TestAdagrad();
  o.adagrad_initial_accumulator = kInitialAccumulator;
  o.lamb = TestLamb();
  o.offload_optimizer.device = c.offload;
  o.offload_optimizer.buffer_count = 2;
  if (c.offload == OffloadDevice::kNvme) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    o.offload_optimizer.nvme_path =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/optimizers_", c.stage, "_", group->rank());
    std::filesystem::create_directories(o.offload_optimizer.nvme_path);
  }
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  ZT_RETURN_IF_ERROR(testing::TrainSteps(*engine, *net, kModel, kSteps, kBatch));
  if (c.clip > 0 && engine->last_grad_norm() <= c.clip) {
    return absl::InternalError(
        absl::StrCat("clipping not engaged: norm ", engine->last_grad_norm()));
  }
  testing::ReferenceOptions ro;
  ro.steps = kSteps;
  ro.batch = kBatch;
  ro.clip = c.clip;
  ro.make_optimizer = c.optimizer == OptimizerKind::kLamb ? FusedLambReference : TorchAdagrad;
  ZT_RETURN_IF_ERROR(testing::MatchesReference(*engine, *net, kModel, ro));
  return std::string("ok");
}

class OptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerTest, MatchesSingleProcessReference) {
  const Case c = GetParam();
  auto outcomes = zerotrain::testing::SpawnRanks(kWorld, [c](int) { return TrainAndCompare(c); });
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(kWorld));
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

std::vector<Case> Cases() {
  using D = OffloadDevice;
  std::vector<Case> cases;
  for (OptimizerKind kind : {OptimizerKind::kAdagrad, OptimizerKind::kLamb}) {
    for (const Case& c :
         {Case{kind, 0}, Case{kind, 1}, Case{kind, 2, D::kNone, 0.05}, Case{kind, 3},
          Case{kind, 1, D::kCpu}, Case{kind, 2, D::kCpu}, Case{kind, 3, D::kCpu, 0.05},
          Case{kind, 2, D::kNvme}, Case{kind, 3, D::kNvme}}) {
      cases.push_back(c);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Stages, OptimizerTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace zerotrain::engine
