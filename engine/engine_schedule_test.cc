// EngineOptions::lr_schedule: the Engine steps DeepSpeed's scheduler itself. With WarmupLR (linear,
// from 0.002 to 0.01 over 4 steps) on 2 ranks at stage 2 with 2 micro-batches per step, lr() after
// each optimizer step is DeepSpeed's value for the steps taken before it (warmup_min_lr for the
// first, where DeepSpeed's last_batch_iteration is -1), whatever set_lr said between micro-steps,
// next_lr() the value the next step will run with (DeepSpeed's get_lr() then), and the parameters
// after 6 steps equal a single-process torch::optim::AdamW over the full batch whose lr is set to
// the same hand-computed values before each step. A step skipped for inf/NaN gradients (a NaN input
// on one rank) does not advance the schedule, as DeepSpeed's engine steps its lr_scheduler only
// when the optimizer stepped: the reference then skips that step. Without a schedule, set_lr's
// value stays.
#include <torch/optim/adamw.h>
#include <torch/types.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;
using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

constexpr int64_t kBatch = 8;  // 2 ranks x 2 micro-batches x 2 samples
constexpr int kGas = 2;
constexpr int kSteps = 6;
constexpr double kMinLr = 0.002;
constexpr double kMaxLr = 0.01;

// DeepSpeed's WarmupLR, linear, warmup_num_steps 4, for the optimizer step taken after `taken`
// earlier ones: iteration taken - 1; warmup_min_lr before the first scheduler step, then
// min + (max - min) * iteration / 4 until the warmup ends.
double ExpectedLr(int taken) {
  const int iteration = taken - 1;
  if (iteration < 0) return kMinLr;
  return iteration < 4 ? kMinLr + (kMaxLr - kMinLr) * (iteration / 4.0) : kMaxLr;
}

// `skip`: the step whose gradients rank 1 makes NaN (-1: none).
absl::StatusOr<std::string> TrainScheduled(int rank, int skip) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(ModelKind::kMlp);
  EngineOptions o;
  o.stage = 2;
  o.train_batch_size = kBatch;
  o.gradient_accumulation_steps = kGas;
  optim::WarmupLROptions warmup;
  warmup.warmup_min_lr = kMinLr;
  warmup.warmup_max_lr = kMaxLr;
  warmup.warmup_num_steps = 4;
  warmup.warmup_type = optim::WarmupType::kLinear;
  o.lr_schedule = warmup;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  const int world = group->world_size();
  const int64_t micro = engine->batch().micro_batch_size;
  int taken = 0;
  for (int step = 0; step < kSteps; ++step) {
    testing::Batch b = testing::GlobalBatch(ModelKind::kMlp, step, kBatch);
    if (step == skip && rank == 1) b.x[micro][0] = NAN;  // in rank 1's first micro-batch
    for (int g = 0; g < kGas; ++g) {
      const int64_t first = (g * world + rank) * micro;
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
      }
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      engine->set_lr(1.0);  // the schedule decides at the boundary, not this
      ZT_RETURN_IF_ERROR(engine->Step());
    }
    if (std::abs(engine->lr() - ExpectedLr(taken)) > 1e-15) {
      return absl::InternalError(
          absl::StrCat("step ", step, ": lr ", engine->lr(), ", want ", ExpectedLr(taken)));
    }
    const int64_t want_skipped = step >= skip && skip >= 0 ? 1 : 0;
    if (engine->skipped_steps() != want_skipped) {
      return absl::InternalError(absl::StrCat("step ", step, ": ", engine->skipped_steps(),
                                              " skipped steps, want ", want_skipped));
    }
    if (step != skip) ++taken;
    // What the next step will run with (DeepSpeed's get_lr() after a step).
    if (std::abs(engine->next_lr() - ExpectedLr(taken)) > 1e-15) {
      return absl::InternalError(absl::StrCat("after step ", step, ": next_lr ", engine->next_lr(),
                                              ", want ", ExpectedLr(taken)));
    }
  }
  testing::ReferenceOptions ro;
  ro.steps = kSteps;
  ro.batch = kBatch;
  ro.make_optimizer = [skip](const std::vector<torch::Tensor>& params) -> testing::ReferenceStep {
    auto adam = std::make_shared<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(kMaxLr).weight_decay(0.01));
    auto taken = std::make_shared<int>(0);
    auto calls = std::make_shared<int>(0);
    return [adam, taken, calls, skip] {
      if ((*calls)++ == skip) return;  // the engine skipped it: no step, no schedule step
      const double lr = ExpectedLr((*taken)++);
      for (auto& g : adam->param_groups()) {
        static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
      }
      adam->step();
    };
  };
  ZT_RETURN_IF_ERROR(testing::MatchesReference(*engine, *net, ModelKind::kMlp, ro));
  return std::string("ok");
}

TEST(EngineScheduleTest, StepsDeepSpeedsSchedulerBeforeEachOptimizerStep) {
  auto outcomes = SpawnRanks(2, [](int rank) { return TrainScheduled(rank, -1); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(EngineScheduleTest, ASkippedStepDoesNotAdvanceTheSchedule) {
  auto outcomes = SpawnRanks(2, [](int rank) { return TrainScheduled(rank, 2); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

absl::StatusOr<std::string> Unscheduled() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(ModelKind::kMlp);
  EngineOptions o;
  o.stage = 1;
  o.train_micro_batch_size_per_gpu = kBatch;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  engine->set_lr(0.125);
  ZT_RETURN_IF_ERROR(testing::TrainSteps(*engine, *net, ModelKind::kMlp, 2, kBatch));
  if (engine->lr() != 0.125) return absl::InternalError(absl::StrCat("lr ", engine->lr()));
  return std::string("ok");
}

TEST(EngineScheduleTest, WithoutAScheduleSetLrStays) {
  auto outcomes = SpawnRanks(2, [](int) { return Unscheduled(); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
