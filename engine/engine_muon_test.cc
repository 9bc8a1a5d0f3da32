// Muon through the Engine on 2 ranks: ZeRO stages 0-3, offload_optimizer cpu and nvme, clipping of
// the updates (ZeRO's order) and of the raw gradients (stage 0's), with buckets and sub-groups that
// cut every matrix across ranks and sub-groups. After 2 steps the parameters equal a single-process
// reference that steps whole matrices: each Muon matrix's momentum, Nesterov blend and update
// from its whole gradient, torch::optim::AdamW for the rest. A rank that orthogonalised only its
// own piece, or assembled the matrix wrongly, would not match. Then a run resumed from a
// checkpoint at step 3 ends bitwise where the uninterrupted run does (the momentum is saved), a
// step skipped for overflow leaves the momentum untouched, and Muon's matrices hold one state
// buffer (Adam's parameters two).
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>
#include <torch/types.h>

#include <cstdlib>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "optim/newton_schulz.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;

constexpr int kWorld = 2;
// Newton-Schulz boosts a gradient's smallest singular directions about 3.4445^5 ~ 500-fold, so
// two runs whose products round apart in the last bit (the engine's parameters are views of a
// flat buffer, aligned otherwise) part visibly after a few steps, as DeepSpeed's own runs on 1 and
// 2 threads do; two steps still see the momentum carried over, the clipping and every piece.
constexpr int kSteps = 2;
constexpr int64_t kBatch = 8;
constexpr ModelKind kModel = ModelKind::kTransformer;

struct Case {
  int stage;
  OffloadDevice offload = OffloadDevice::kNone;
  double clip = 0;
  bool clip_first = false;  // MuonOptions::orthogonalize_clipped
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("stage", c.stage, "_offload_", OffloadDeviceName(c.offload),
                      c.clip > 0 ? (c.clip_first ? "_clip_first" : "_clip") : "");
}

// Runs fn as kWorld ranks; every one must succeed.
void ExpectRanksOk(const zerotrain::testing::RankFn& fn) {
  auto outcomes = zerotrain::testing::SpawnRanks(kWorld, fn);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(kWorld));
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

MuonOptions TestMuon(bool clip_first) {
  MuonOptions m;
  m.lr = 0.02;
  m.momentum = 0.9;
  m.weight_decay = 0.01;
  m.adam.lr = 1e-2;
  m.adam.weight_decay = 0.01;
  // Every matrix (the test net's names say nothing of embeddings).
  m.use_muon = [](const std::string&, const std::vector<int64_t>& shape) {
    return shape.size() >= 2;
  };
  m.orthogonalize_clipped = clip_first;
  return m;
}

EngineOptions Options(const Case& c, int rank) {
  EngineOptions o;
  o.stage = c.stage;
  o.train_micro_batch_size_per_gpu = kBatch;  // every rank trains on the whole batch
  o.gradient_clipping = c.clip;
  o.reduce_bucket_size = 64;  // below the smallest matrix: each is cut across ranks
  o.allgather_bucket_size = 64;
  o.sub_group_size = 37;  // and across sub-groups
  o.optimizer = OptimizerKind::kMuon;
  o.muon = TestMuon(c.clip_first);
  o.offload_optimizer.device = c.offload;
  if (c.offload == OffloadDevice::kNvme) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    o.offload_optimizer.nvme_path =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/muon_nvme_", rank);
    std::filesystem::create_directories(o.offload_optimizer.nvme_path);
    o.offload_optimizer.buffer_count = 2;
  }
  return o;
}

// MuonWithAuxAdam on whole tensors, clipping as the case says.
testing::ReferenceStep ReferenceMuon(const std::vector<torch::Tensor>& params, const Case& c) {
  const MuonOptions m = TestMuon(c.clip_first);
  std::vector<torch::Tensor> muon, adam, momenta;
  for (const torch::Tensor& p : params) {
    (p.dim() >= 2 ? muon : adam).push_back(p);
    if (p.dim() >= 2) momenta.push_back(torch::zeros_like(p));
  }
  auto aux = std::make_shared<torch::optim::AdamW>(adam, torch::optim::AdamWOptions(m.adam.lr)
                                                             .betas({m.adam.beta1, m.adam.beta2})
                                                             .eps(m.adam.eps)
                                                             .weight_decay(m.adam.weight_decay));
  return [=]() mutable {
    torch::NoGradGuard no_grad;
    const auto clip = [&] {
      if (c.clip > 0) torch::nn::utils::clip_grad_norm_(params, c.clip);
    };
    if (c.clip_first) clip();
    for (size_t i = 0; i < muon.size(); ++i) {
      const torch::Tensor g = muon[i].grad();
      momenta[i].copy_(torch::lerp(momenta[i], g, 1.0 - m.momentum));
      const torch::Tensor u = torch::lerp(g, momenta[i], m.momentum);
      muon[i].mutable_grad() =
          optim::MuonUpdate(u.reshape({u.size(0), -1}), m.ns_method).view(g.sizes()).clone();
    }
    if (!c.clip_first) clip();
    for (const torch::Tensor& p : muon) {
      p.mul_(1.0 - m.lr * m.weight_decay);
      p.add_(p.grad(), -m.lr);
    }
    aux->step();
  };
}

absl::StatusOr<std::string> TrainAndCompare(const Case& c) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, Options(c, group->rank()), group.get()));
  ZT_RETURN_IF_ERROR(testing::TrainSteps(*engine, *net, kModel, kSteps, kBatch));
  testing::ReferenceOptions ro;
  ro.steps = kSteps;
  ro.batch = kBatch;
  ro.make_optimizer = [c](const std::vector<torch::Tensor>& params) {
    return ReferenceMuon(params, c);
  };
  // Bit for bit but for fp16 Newton-Schulz products, which a different thread split may round
  // apart (a matrix assembled from the wrong pieces is off by its whole update, ~1e-2).
  testing::ReferenceRun ref = testing::RunReference(kModel, ro);
  ZT_ASSIGN_OR_RETURN(auto gathered, engine->GatherParameters(testing::UniqueParameters(*net)));
  const std::string diff = testing::CompareParams(*net, *ref.net, 1e-5, 1e-4);
  ZT_RETURN_IF_ERROR(gathered->Close());
  if (!diff.empty()) return absl::InternalError(absl::StrCat("parameters differ: ", diff));
  return std::string("ok");
}

class MuonTest : public ::testing::TestWithParam<Case> {};

TEST_P(MuonTest, MatchesSingleProcessReference) {
  const Case c = GetParam();
  ExpectRanksOk([c](int) { return TrainAndCompare(c); });
}

INSTANTIATE_TEST_SUITE_P(Stages, MuonTest,
                         ::testing::Values(Case{0, OffloadDevice::kNone, 0.05, true}, Case{0},
                                           Case{1}, Case{2, OffloadDevice::kNone, 0.05},
                                           Case{3, OffloadDevice::kNone, 0.05},
                                           Case{2, OffloadDevice::kCpu, 0.05},
                                           Case{3, OffloadDevice::kCpu},
                                           Case{3, OffloadDevice::kNvme, 0.05}),
                         CaseName);

// Steps [first, last) of the test's batches.
absl::Status TrainRange(Engine& engine, testing::TestNet& net, int first, int last) {
  return testing::TrainStepRange(engine, net, kModel, first, last, kBatch);
}

absl::StatusOr<std::string> ResumeAndCompare(const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const Case c{2, OffloadDevice::kNone, 0.05};
  auto straight = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto a, Engine::Create(*straight, Options(c, group->rank()), group.get()));
  ZT_RETURN_IF_ERROR(TrainRange(*a, *straight, 0, 3));
  ZT_RETURN_IF_ERROR(a->SaveCheckpoint(dir));
  ZT_RETURN_IF_ERROR(TrainRange(*a, *straight, 3, 6));
  auto resumed = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto b, Engine::Create(*resumed, Options(c, group->rank()), group.get()));
  ZT_RETURN_IF_ERROR(b->LoadCheckpoint(dir).status());
  ZT_RETURN_IF_ERROR(TrainRange(*b, *resumed, 3, 6));
  const std::string diff = testing::CompareParams(*resumed, *straight, 0, 0);
  if (!diff.empty()) return absl::InternalError(absl::StrCat("resumed run differs: ", diff));
  return std::string("ok");
}

TEST(MuonResumeTest, ResumedRunEndsBitwiseWhereTheStraightRunDoes) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/muon_resume");
  ExpectRanksOk([dir](int) { return ResumeAndCompare(dir); });
}

// A step whose gradients overflow is skipped and leaves the momentum as it was: with one such step
// between steps 2 and 3, the run ends bitwise where a run without it does.
absl::StatusOr<std::string> SkipAndCompare() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const Case c{3, OffloadDevice::kNone, 0.05};
  auto plain = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto a, Engine::Create(*plain, Options(c, group->rank()), group.get()));
  ZT_RETURN_IF_ERROR(TrainRange(*a, *plain, 0, 4));
  auto skipping = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto b, Engine::Create(*skipping, Options(c, group->rank()), group.get()));
  ZT_RETURN_IF_ERROR(TrainRange(*b, *skipping, 0, 2));
  {
    testing::Batch batch = testing::GlobalBatch(kModel, 2, kBatch);
    torch::Tensor loss;
    {
      auto forward = b->BeginForward();
      loss = testing::Loss(*skipping, batch.x, batch.y) * std::numeric_limits<float>::infinity();
    }
    ZT_RETURN_IF_ERROR(b->Backward(loss));
    ZT_RETURN_IF_ERROR(b->Step());
  }
  if (b->skipped_steps() != 1) {
    return absl::InternalError(absl::StrCat("skipped steps: ", b->skipped_steps()));
  }
  ZT_RETURN_IF_ERROR(TrainRange(*b, *skipping, 2, 4));
  ZT_ASSIGN_OR_RETURN(const std::string diff,
                      testing::GatheredDifference(*b, *skipping, *a, *plain));
  if (!diff.empty()) return absl::InternalError(absl::StrCat("after a skipped step: ", diff));
  return std::string("ok");
}

TEST(MuonOverflowTest, ASkippedStepLeavesTheMomentumAsItWas) {
  ExpectRanksOk([](int) { return SkipAndCompare(); });
}

// Muon's matrices keep one state buffer (the momentum), Adam's parameters two: summed over the
// ranks, Muon's optimizer states are half of Adam's for the same model plus 4 bytes per element of
// Adam's parameters (each rank's whole copy of them at stage 0).
absl::StatusOr<std::string> CompareStateBytes(int stage, bool bf16) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const Case c{stage};
  EngineOptions muon_options = Options(c, group->rank());
  if (bf16) {
    muon_options.precision = Precision::kBFloat16;
    muon_options.bf16_master_weights = muon_options.bf16_optimizer_states = true;
  }
  EngineOptions adam_options = muon_options;
  adam_options.optimizer = OptimizerKind::kAdam;
  auto adam_net = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto adam, Engine::Create(*adam_net, adam_options, group.get()));
  auto muon_net = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto muon, Engine::Create(*muon_net, muon_options, group.get()));
  int64_t adam_elements = 0;
  for (const torch::Tensor& p : testing::UniqueParameters(*testing::MakeNet(kModel))) {
    if (p.dim() < 2) adam_elements += p.numel();
  }
  torch::Tensor sums = torch::tensor(
      {adam->model_state_bytes().optimizer_states, muon->model_state_bytes().optimizer_states},
      torch::kDouble);
  ZT_RETURN_IF_ERROR(group->AllReduce(sums, comm::ReduceOp::kSum));
  const double want = sums[0].item<double>() / 2 +
                      (bf16 ? 2.0 : 4.0) * adam_elements * (stage == 0 ? group->world_size() : 1);
  if (sums[1].item<double>() != want) {
    return absl::InternalError(absl::StrCat(
        "stage ", stage, bf16 ? " bf16" : "", ": Muon's states ", sums[1].item<double>(),
        " bytes, want ", want, " (Adam's ", sums[0].item<double>(), ")"));
  }
  if (!bf16) return std::string("ok");
  // The compact array in bf16 through the step: two steps, and the loss falls.
  ZT_RETURN_IF_ERROR(testing::TrainSteps(*muon, *muon_net, kModel, 2, kBatch));
  testing::Batch b = testing::GlobalBatch(kModel, 0, kBatch);
  double after = 0;
  {
    auto forward = muon->BeginForward();
    after = testing::Loss(*muon_net, b.x, b.y).item<double>();
  }
  const double before = testing::Loss(*testing::MakeNet(kModel), b.x, b.y).item<double>();
  if (!(after < before)) {
    return absl::InternalError(
        absl::StrCat("stage ", stage, " bf16: loss ", before, " -> ", after));
  }
  return std::string("ok");
}

// One SpawnRanks per TEST (its children rerun the TEST's first call), so the stages run in it.
TEST(MuonMemoryTest, MatricesKeepOneStateBuffer) {
  ExpectRanksOk([](int) -> absl::StatusOr<std::string> {
    for (int stage : {0, 2, 3}) ZT_RETURN_IF_ERROR(CompareStateBytes(stage, false).status());
    // bf16 master and states (stages 1-3): the compact array is bf16 too.
    for (int stage : {2, 3}) ZT_RETURN_IF_ERROR(CompareStateBytes(stage, true).status());
    return std::string("ok");
  });
}

}  // namespace
}  // namespace zerotrain::engine
