// ScheduleFromConfig / optim::MakeLrSchedule: the section builds the schedule DeepSpeed's would,
// checked against DeepSpeed's formulas written out here, and rejects what DeepSpeed's constructors
// would.
#include "trainer/config/config_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace zerotrain::trainer {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<optim::LrSchedule> Build(const SchedulerConfig& config, double lr, int64_t steps,
                                         SchedulerConfig* effective) {
  absl::StatusOr<LrScheduleOptions> o = ScheduleFromConfig(config, lr, steps, effective);
  EXPECT_TRUE(o.ok()) << o.status();
  if (!o.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<optim::LrSchedule>> s = optim::MakeLrSchedule(o->options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(ConfigSchedule, NoSchedulerIsConstantLr) {
  SchedulerConfig effective;
  absl::StatusOr<LrScheduleOptions> o = ScheduleFromConfig({}, 1e-3, 10, &effective);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->type, "");
  absl::StatusOr<std::unique_ptr<optim::LrSchedule>> s = optim::MakeLrSchedule(o->options);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, nullptr);
}

TEST(ConfigSchedule, WarmupDecayLinearMatchesDeepSpeedsFormula) {
  SchedulerConfig c;
  c.set_type("warmupdecaylr");
  c.mutable_params()->set_warmup_min_lr(1e-4);
  c.mutable_params()->set_warmup_max_lr(1e-3);
  c.mutable_params()->set_warmup_num_steps(10);
  c.mutable_params()->set_warmup_type("linear");
  SchedulerConfig effective;
  std::unique_ptr<optim::LrSchedule> s = Build(c, 0, /*steps=*/50, &effective);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(effective.type(), "WarmupDecayLR");
  EXPECT_EQ(effective.params().total_num_steps(), 50);  // run.steps when left out
  for (int64_t it : {0, 3, 9, 10, 20, 49, 60}) {
    // lr_schedules.py: linear warm-up gamma = it / N, then max(0, (T - it) / max(1, T - N)).
    const double gamma = it < 10 ? it / 10.0 : std::max(0.0, (50.0 - it) / 40.0);
    EXPECT_NEAR(s->LearningRate(it), 1e-4 + (1e-3 - 1e-4) * gamma, 1e-12) << it;
  }
}

TEST(ConfigSchedule, WarmupCosineScalesTheOptimizerLr) {
  SchedulerConfig c;
  c.set_type("WarmupCosineLR");
  c.mutable_params()->set_warmup_num_steps(4);
  c.mutable_params()->set_warmup_type("linear");
  c.mutable_params()->set_cos_min_ratio(0.1);
  SchedulerConfig effective;
  std::unique_ptr<optim::LrSchedule> s = Build(c, 2e-3, 20, &effective);
  ASSERT_NE(s, nullptr);
  // Past the warm-up (lr_schedules.py): ratio = cos_min + (1 - cos_min) * (1 + cos(pi * p)) / 2
  // with p = (it - N + 1) / (T - N).
  for (int64_t it : {8, 12, 19}) {
    const double progress = (it - 4.0 + 1) / (20.0 - 4.0);
    const double ratio = 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress));
    EXPECT_NEAR(s->LearningRate(it), 2e-3 * ratio, 1e-12) << it;
  }
  EXPECT_EQ(effective.params().total_num_steps(), 20);
}

TEST(ConfigSchedule, OneCycleAndRangeTestDefaultsAreWrittenOut) {
  SchedulerConfig c;
  c.set_type("OneCycle");
  c.mutable_params()->set_cycle_min_lr(1e-4);
  c.mutable_params()->set_cycle_max_lr(1e-3);
  c.mutable_params()->set_cycle_first_step_size(10);
  SchedulerConfig effective;
  std::unique_ptr<optim::LrSchedule> s = Build(c, 0, 100, &effective);
  ASSERT_NE(s, nullptr);
  EXPECT_NEAR(s->LearningRate(9), 1e-3, 1e-4);  // the peak of the triangle
  EXPECT_TRUE(effective.params().cycle_momentum());
  EXPECT_EQ(effective.params().cycle_max_mom(), optim::OneCycleOptions{}.cycle_max_mom);

  SchedulerConfig r;
  r.set_type("LRRangeTest");
  r.mutable_params()->set_lr_range_test_step_size(5);
  s = Build(r, 0, 100, &effective);
  ASSERT_NE(s, nullptr);
  // min_lr * (1 + rate * (it + 1) / step_size) with the default min_lr and rate.
  EXPECT_NEAR(s->LearningRate(9), 1e-3 * (1 + 1.0 * 10 / 5), 1e-12);
}

TEST(ConfigSchedule, BadSectionsNameTheField) {
  SchedulerConfig effective;
  SchedulerConfig c;
  c.set_type("WarmupLR");
  c.mutable_params()->set_warmup_type("cubic");
  absl::StatusOr<LrScheduleOptions> o = ScheduleFromConfig(c, 1e-3, 10, &effective);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()),
              HasSubstr("scheduler.params.warmup_type = \"cubic\""));

  c.mutable_params()->clear_warmup_type();
  c.mutable_params()->set_last_batch_iteration(5);
  o = ScheduleFromConfig(c, 1e-3, 10, &effective);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnimplemented);

  SchedulerConfig params_only;
  params_only.mutable_params()->set_warmup_num_steps(3);
  o = ScheduleFromConfig(params_only, 1e-3, 10, &effective);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("scheduler.type is not"));
}

}  // namespace
}  // namespace zerotrain::trainer
