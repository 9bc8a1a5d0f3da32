// The engine on CUDA devices (issue 18's GPU set; tools/gpu_check.sh runs it on a GPU machine):
// stages 0-2 end where a plain single-device LibTorch AdamW loop on the same GPU ends, within the
// CPU tests' tolerance, over NCCL (one rank per GPU) and over Gloo with two ranks sharing one GPU
// (CUDA tensors staged through host memory, since NCCL refuses two ranks on one device); bf16
// follows the fp32 reference; an fp16 overflow on one rank skips the step everywhere; a NCCL peer
// that dies becomes an error within the timeout; and each stage's peak device memory is below the
// stage before; the step's phase times come from CUDA events. Every test skips, saying why, where
// no CUDA device is visible.
#include <torch/types.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/cuda_testing.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::Join;
using testing::ModelKind;
using testing::RankDevice;
using testing::Wire;
using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

struct Case {
  int stage;
  int world;
  Wire wire;
  ModelKind model = ModelKind::kTransformer;
  int gas = 1;
  double clip = 0;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("stage", c.stage, "_w", c.world,
                      c.wire == Wire::kNccl ? "_nccl" : "_gloo_one_gpu", "_",
                      testing::ModelName(c.model), "_gas", c.gas, c.clip > 0 ? "_clip" : "");
}

absl::StatusOr<std::string> TrainAndCompare(const Case& c, int rank) {
  constexpr int64_t kBatch = 16;
  constexpr int kSteps = 20;
  const torch::Device device = RankDevice(c.wire, rank);
  ZT_ASSIGN_OR_RETURN(auto group, Join(c.wire));
  auto net = testing::MakeNet(c.model);
  EngineOptions o;
  o.device = device;
  o.stage = c.stage;
  o.train_batch_size = kBatch;
  o.gradient_accumulation_steps = c.gas;
  o.gradient_clipping = c.clip;
  o.reduce_bucket_size = 64;  // several buckets, so reductions overlap backward
  o.allgather_bucket_size = 64;
  o.adam.lr = 1e-3;
  o.adam.weight_decay = 0.01;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  if (net->parameters().front().device() != device) {
    return absl::InternalError("Engine::Create left the module off the device");
  }
  const int64_t micro = engine->batch().micro_batch_size;
  double last_step_wall = 0;
  for (int step = 0; step < kSteps; ++step) {
    const auto started = std::chrono::steady_clock::now();
    testing::Batch b = testing::GlobalBatch(c.model, step, kBatch);
    for (int g = 0; g < c.gas; ++g) {
      const int64_t first = (g * c.world + rank) * micro;
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
      }
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      ZT_RETURN_IF_ERROR(engine->Step());
    }
    (void)engine->last_step_times();  // waits for the device to finish the step
    last_step_wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  // The phase times come from CUDA events: each phase took device time, and together they fit
  // in the host's wall time of the step (which waited for the device at its end).
  const StepTimes& t = engine->last_step_times();
  const double phases = t.forward + t.backward + t.backward_comm + t.step + t.allgather;
  if (t.forward <= 0 || t.backward <= 0 || t.step <= 0 || phases > last_step_wall + 2e-3) {
    return absl::InternalError(absl::StrCat("step times (s): forward ", t.forward, ", backward ",
                                            t.backward, ", backward comm ", t.backward_comm,
                                            ", step ", t.step, ", all-gather ", t.allgather,
                                            "; the step took ", last_step_wall, " s of wall time"));
  }
  // Over Gloo every reduction goes through host memory (at least each step's gradients);
  // over NCCL only the engine's small control values (fingerprints, statistics) do.
  int64_t grad_bytes = 0;
  for (const auto& p : net->parameters()) grad_bytes += p.numel() * 4;
  const TierTraffic io = engine->traffic();
  const int64_t want_at_least = c.wire == Wire::kNccl ? 0 : int64_t{kSteps} * grad_bytes;
  const int64_t want_below = c.wire == Wire::kNccl ? (1 << 20) : INT64_MAX;
  if (io.device_to_host < want_at_least || io.device_to_host >= want_below) {
    return absl::InternalError(absl::StrCat("device-to-host traffic ", io.device_to_host,
                                            " bytes; want at least ", want_at_least, ", below ",
                                            want_below));
  }
  testing::ReferenceOptions ro;
  ro.steps = kSteps;
  ro.batch = kBatch;
  ro.clip = c.clip;
  ro.device = device;
  testing::ReferenceRun ref = testing::RunReference(c.model, ro);
  const std::string diff = testing::CompareParams(*net, *ref.net, 1e-6, 1e-5);
  if (!diff.empty()) return absl::InternalError(absl::StrCat("parameters differ: ", diff));
  return std::string("ok");
}

class CudaEquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEquivalenceTest, MatchesSingleDeviceAdamW) {
  const Case c = GetParam();
  ZT_SKIP_WITHOUT_GPUS(c.wire == Wire::kNccl ? c.world : 1);
  auto outcomes = SpawnRanks(c.world, [c](int rank) { return TrainAndCompare(c, rank); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(
    Stages, CudaEquivalenceTest,
    // A few cases, not the CPU grid: the GPU set must finish within the device budget.
    ::testing::Values(Case{0, 1, Wire::kNccl}, Case{1, 1, Wire::kNccl}, Case{2, 1, Wire::kNccl},
                      Case{1, 2, Wire::kGlooOneGpu}, Case{2, 2, Wire::kGlooOneGpu},
                      Case{2, 2, Wire::kGlooOneGpu, ModelKind::kMlp, 2, 0.05},
                      Case{1, 2, Wire::kNccl}, Case{2, 2, Wire::kNccl, ModelKind::kMlp, 2, 0.05}),
    CaseName);

// bf16 on the device follows the fp32 single-device reference's loss within 1% at every step.
TEST(CudaPrecisionTest, Bf16FollowsTheFp32Reference) {
  ZT_SKIP_WITHOUT_GPUS(1);
  auto outcomes = SpawnRanks(1, [](int rank) -> absl::StatusOr<std::string> {
    constexpr int64_t kBatch = 16;
    const torch::Device device = RankDevice(Wire::kNccl, rank);
    ZT_ASSIGN_OR_RETURN(auto group, Join(Wire::kNccl));
    auto net = testing::MakeNet(ModelKind::kTransformer);
    EngineOptions o;
    o.device = device;
    o.stage = 2;
    o.train_batch_size = kBatch;
    o.precision = Precision::kBFloat16;
    o.adam.lr = 1e-2;
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
    testing::ReferenceOptions ro;
    ro.lr = 1e-2;
    ro.device = device;
    const testing::ReferenceRun ref = testing::RunReference(ModelKind::kTransformer, ro);
    for (int step = 0; step < ro.steps; ++step) {
      testing::Batch b = testing::GlobalBatch(ModelKind::kTransformer, step, kBatch);
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = testing::Loss(*net, b.x, b.y);
      }
      const double got = loss.item<double>();
      if (std::abs(got - ref.losses[step]) > 0.01 * std::abs(ref.losses[step])) {
        return absl::InternalError(
            absl::StrCat("step ", step, ": bf16 loss ", got, " vs ", ref.losses[step]));
      }
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      ZT_RETURN_IF_ERROR(engine->Step());
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// An inf in rank 1's gradient at one step: every rank skips that step (parameters unchanged,
// the scale halves) and the ranks end equal.
TEST(CudaPrecisionTest, Fp16OverflowOnOneRankSkipsEverywhere) {
  ZT_SKIP_WITHOUT_GPUS(1);
  const Wire wire = testing::WireFor(2);
  auto outcomes = SpawnRanks(2, [wire](int rank) -> absl::StatusOr<std::string> {
    constexpr int kSteps = 6, kBadStep = 3;
    constexpr int64_t kBatch = 16;
    const torch::Device device = RankDevice(wire, rank);
    ZT_ASSIGN_OR_RETURN(auto group, Join(wire));
    auto net = testing::MakeNet(ModelKind::kMlp);
    EngineOptions o;
    o.device = device;
    o.stage = 2;
    o.train_batch_size = kBatch;
    o.precision = Precision::kFloat16;
    o.fp16.initial_scale_power = 8;
    o.fp16.hysteresis = 1;
    o.reduce_bucket_size = 64;
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
    const int64_t micro = engine->batch().micro_batch_size;
    auto params = [&] {
      std::vector<torch::Tensor> all;
      for (const auto& p : testing::UniqueParameters(*net)) {
        all.push_back(p.detach().to(torch::kCPU, torch::kFloat).reshape({-1}));
      }
      return torch::cat(all);
    };
    for (int step = 0; step < kSteps; ++step) {
      testing::Batch b = testing::GlobalBatch(ModelKind::kMlp, step, kBatch);
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = testing::Loss(*net, b.x.narrow(0, rank * micro, micro),
                             b.y.narrow(0, rank * micro, micro));
        const bool bad = step == kBadStep && rank == 1;
        loss = loss + testing::UniqueParameters(*net).front().sum().to(torch::kFloat) *
                          (bad ? std::numeric_limits<float>::infinity() : 0.0f);
      }
      const torch::Tensor before = params();
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      ZT_RETURN_IF_ERROR(engine->Step());
      if (torch::equal(before, params()) != (step == kBadStep)) {
        return absl::InternalError(absl::StrCat("step ", step, ": parameters ",
                                                step == kBadStep ? "changed" : "unchanged"));
      }
    }
    if (engine->skipped_steps() != 1 || engine->loss_scale() != 128.0) {
      return absl::InternalError(
          absl::StrCat("skipped ", engine->skipped_steps(), ", loss scale ", engine->loss_scale()));
    }
    const torch::Tensor p = params();
    return std::string(static_cast<const char*>(p.data_ptr()), p.nbytes());
  });
  ASSERT_EQ(outcomes.size(), 2u);
  for (const auto& o : outcomes) ASSERT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
  EXPECT_EQ(outcomes[0].payload, outcomes[1].payload) << "ranks ended with different weights";
}

// Rank 1 leaves before the engine's first collective: rank 0's NCCL op fails within its timeout.
TEST(CudaFaultTest, ANcclPeerThatDiesBecomesAnErrorWithinTheTimeout) {
  ZT_SKIP_WITHOUT_GPUS(2);
  zerotrain::testing::SpawnOptions so;
  so.deadline = std::chrono::seconds(90);
  auto outcomes = SpawnRanks(
      2,
      [](int rank) -> absl::StatusOr<std::string> {
        const torch::Device device = RankDevice(Wire::kNccl, rank);
        comm::GroupOptions g;
        g.backend = comm::BackendKind::kNccl;
        g.timeout = std::chrono::seconds(10);
        ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv(g));
        if (rank == 1) std::_Exit(3);
        torch::Tensor t = torch::ones({1024}, torch::TensorOptions().device(device));
        absl::Status s = group->AllReduce(t, comm::ReduceOp::kSum);
        if (s.ok()) return absl::InternalError("the all-reduce succeeded without its peer");
        return std::string(s.message());
      },
      so);
  ASSERT_EQ(outcomes.size(), 2u);
  ASSERT_TRUE(outcomes[0].status.ok()) << FormatOutcomes(outcomes);
  EXPECT_NE(outcomes[0].payload.find("all_reduce"), std::string::npos) << outcomes[0].payload;
  EXPECT_LT(outcomes[0].seconds, 60) << "the error came after the 10 s timeout and more";
}

// Peak allocated bytes of two steps at each of stages 0, 1 and 2 in turn (a fresh net and engine
// each, the allocator's peak reset in between), as the caching allocator counts them.
absl::StatusOr<std::string> PeaksByStage(Wire wire, int rank) {
  const torch::Device device = RankDevice(wire, rank);
  ZT_ASSIGN_OR_RETURN(auto group, Join(wire));
  std::string peaks;
  for (int stage : {0, 1, 2}) {
    EngineOptions o;
    o.device = device;
    o.stage = stage;
    ZT_ASSIGN_OR_RETURN(const int64_t peak, testing::WideMlpPeak(o, group.get()));
    absl::StrAppend(&peaks, peaks.empty() ? "" : " ", peak);
  }
  return peaks;
}

TEST(CudaMemoryTest, EachStageHoldsLessAtItsPeakThanTheOneBefore) {
  ZT_SKIP_WITHOUT_GPUS(1);
  const Wire wire = testing::WireFor(2);
  auto outcomes = SpawnRanks(2, [wire](int rank) { return PeaksByStage(wire, rank); });
  for (const auto& o : outcomes) ASSERT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
  std::istringstream in(outcomes[0].payload);
  int64_t p0 = 0, p1 = 0, p2 = 0;
  ASSERT_TRUE(in >> p0 >> p1 >> p2) << outcomes[0].payload;
  std::cout << "peak allocated bytes on rank 0, stages 0/1/2: " << p0 << " " << p1 << " " << p2
            << "\n";
  EXPECT_LT(p1, p0) << "stage 1's peak is not below stage 0's";
  EXPECT_LT(p2, p1) << "stage 2's peak is not below stage 1's";
}

}  // namespace
}  // namespace zerotrain::engine
