// What each ZeRO stage holds in the process, not in the accounting: the peak bytes of CPU tensors
// (tensor_memory.h, LibTorch's allocator, so glibc's retention is not in it) on rank 0 of two over
// Gloo, for WideMlp in fp32 (6.3M parameters, Ψ = 25.2 MB), through Engine::Create and through a
// steady training step. The ZeRO formula says 16Ψ/4 bytes at stage 0, 14Ψ/4 at stage 1 (a separate
// fp32 master shard), 12Ψ/4 at stage 2 and 8Ψ/4 at stage 3 on two ranks: each stage must hold less
// than the one before at every phase. engine_cuda_test holds the CUDA allocator to the same.
#include <torch/types.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/tensor_memory.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Above what was alive before Engine::Create (the net's parameters), in bytes.
struct Peaks {
  int64_t create = 0;    // Engine::Create, the net already built
  int64_t backward = 0;  // the second iteration's forward and Backward
  int64_t step = 0;      // its Step
};

absl::StatusOr<Peaks> StagePeaks(int stage, comm::ProcessGroup* group) {
  Peaks peaks;
  auto net = std::make_shared<testing::WideMlp>();
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = 8;
  o.reduce_bucket_size = testing::WideMlp::kBucketNumel;
  o.allgather_bucket_size = testing::WideMlp::kBucketNumel;
  o.stage3.prefetch_numel = 1 << 21;
  o.stage3.max_live_numel = 1 << 22;
  const int64_t base = CpuTensorBytes();
  ResetCpuTensorPeak();
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group));
  peaks.create = CpuTensorPeakBytes() - base;
  for (int step = 0; step < 2; ++step) {
    ResetCpuTensorPeak();
    torch::manual_seed(step);
    torch::Tensor loss;
    {
      auto forward = engine->BeginForward();
      loss = net->forward(torch::randn({4, 1024})).pow(2).mean();
    }
    ZT_RETURN_IF_ERROR(engine->Backward(loss));
    loss = torch::Tensor();
    peaks.backward = CpuTensorPeakBytes() - base;
    ResetCpuTensorPeak();
    ZT_RETURN_IF_ERROR(engine->Step());
    peaks.step = CpuTensorPeakBytes() - base;
  }
  return peaks;
}

// "create backward step" per stage 0-3, in bytes, on this rank.
absl::StatusOr<std::string> PeaksByStage() {
  InstallCpuTensorCounter();
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  std::string out;
  for (int stage = 0; stage <= 3; ++stage) {
    ZT_ASSIGN_OR_RETURN(const Peaks p, StagePeaks(stage, group.get()));
    absl::StrAppend(&out, p.create, " ", p.backward, " ", p.step, "\n");
  }
  return out;
}

TEST(EngineMemoryTest, EachStageHoldsLessThanTheOneBeforeAtEveryPhase) {
  auto outcomes = zerotrain::testing::SpawnRanks(2, [](int) { return PeaksByStage(); });
  for (const auto& o : outcomes)
    ASSERT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  std::istringstream in(outcomes[0].payload);
  Peaks p[4];
  for (Peaks& s : p) {
    ASSERT_TRUE(in >> s.create >> s.backward >> s.step) << outcomes[0].payload;
  }
  const double psi = 6 * (1024.0 * 1024 + 1024) * 4;  // fp32 parameter bytes
  for (int stage = 0; stage <= 3; ++stage) {
    std::cout << "stage " << stage << " peaks in Ψ (" << psi / kMiB << " MiB): create "
              << p[stage].create / psi << ", backward " << p[stage].backward / psi << ", step "
              << p[stage].step / psi << "\n";
  }
  for (int stage = 1; stage <= 3; ++stage) {
    EXPECT_LT(p[stage].create, p[stage - 1].create) << "Create at stage " << stage;
    EXPECT_LT(p[stage].backward, p[stage - 1].backward) << "backward at stage " << stage;
    EXPECT_LT(p[stage].step, p[stage - 1].step) << "the step at stage " << stage;
  }
}

}  // namespace
}  // namespace zerotrain::engine
