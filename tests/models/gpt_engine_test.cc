// The default run in miniature: the default GPT on 2 ranks (one thread each), ZeRO stage 2, fp32,
// micro-batch 8 x 128 from the DistributedSampler over the embedded corpus. The loss must fall
// from about ln 256 well into the byte-frequency range within a few dozen steps; each rank's
// milliseconds per step are printed (how long the default run's steps take).
#include <gtest/gtest.h>
#include <torch/types.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "models/gpt.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"
#include "trainer/data/sampler.h"
#include "trainer/data/token_dataset.h"

namespace zerotrain::trainer {
namespace {

constexpr int kSteps = 30;

// Returns "first_loss last_loss ms_per_step" and the engine's mean breakdown in ms.
absl::StatusOr<std::string> TrainRank(int rank) {
  ZT_ASSIGN_OR_RETURN(auto info, comm::RendezvousFromEnv());
  ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(info, {}));
  const models::GptOptions mo;  // the defaults are the default run's model
  torch::manual_seed(0);
  ZT_ASSIGN_OR_RETURN(std::shared_ptr<models::Gpt> model, models::MakeGpt(mo));
  engine::EngineOptions o;
  o.stage = 2;
  o.precision = engine::Precision::kFloat32;  // the default run's (configs/default.pbtxt)
  o.train_micro_batch_size_per_gpu = 8;
  o.gradient_accumulation_steps = 1;
  o.adam.lr = 3e-3;
  o.adam.beta2 = 0.95;
  ZT_ASSIGN_OR_RETURN(auto engine, engine::Engine::Create(*model, o, group.get()));
  ZT_ASSIGN_OR_RETURN(TokenDataset data, LoadTokens(DataOptions{}, mo.vocab_size, mo.block_size));
  ZT_ASSIGN_OR_RETURN(auto sampler, DistributedSampler::Create(data.NumTrainWindows(),
                                                               group->world_size(), rank, 8, 1));
  double first = 0, last = 0;
  engine::StepTimes sum;
  auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < kSteps; ++step) {
    if (step == 1) start = std::chrono::steady_clock::now();  // after the first (warm-up) step
    Batch b = sampler.NextBatch(data);
    at::Tensor loss = models::GptLoss(model->forward(b.x), b.y);
    (step == 0 ? first : last) = loss.item<double>();
    ZT_RETURN_IF_ERROR(engine->Backward(loss));
    ZT_RETURN_IF_ERROR(engine->Step());
    if (step == 0) continue;
    const engine::StepTimes& t = engine->last_step_times();
    sum.forward += t.forward;
    sum.backward += t.backward;
    sum.backward_comm += t.backward_comm;
    sum.step += t.step;
    sum.allgather += t.allgather;
  }
  const double ms =
      1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
      (kSteps - 1);
  const double k = 1e3 / (kSteps - 1);
  return absl::StrCat(first, " ", last, " ", ms, " (forward ", sum.forward * k, ", backward ",
                      sum.backward * k, ", backward_comm ", sum.backward_comm * k, ", step ",
                      sum.step * k, ", allgather ", sum.allgather * k, ")");
}

TEST(GptEngineTest, DefaultModelLearnsUnderStage2OnTwoRanks) {
  testing::SpawnOptions so;
  so.deadline = std::chrono::seconds(240);
  for (const auto& out : testing::SpawnRanks(2, TrainRank, so)) {
    ASSERT_TRUE(out.status.ok()) << "rank " << out.rank << ": " << out.status;
    std::vector<std::string> f = absl::StrSplit(out.payload, absl::MaxSplits(' ', 3));
    ASSERT_EQ(f.size(), 4u);
    const double first = std::stod(f[0]), last = std::stod(f[1]);
    std::printf("rank %d: loss %.3f -> %.3f after %d steps, %.0f ms/step %s\n", out.rank, first,
                last, kSteps, std::stod(f[2]), f[3].c_str());
    EXPECT_NEAR(first, std::log(256.0), 0.3);
    EXPECT_LT(last, 3.8);
  }
}

}  // namespace
}  // namespace zerotrain::trainer
