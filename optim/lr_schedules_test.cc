// Each DeepSpeed LR schedule against its formula at the boundaries: before the first step,
// step 0, the end of warm-up (or of a cycle half), the last step and past the end.
#include "optim/lr_schedules.h"

#include <cmath>

#include "gtest/gtest.h"

namespace zerotrain::optim {
namespace {

template <class T>
T Ok(absl::StatusOr<T> s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(WarmupLRTest, LogAndLinearWarmup) {
  WarmupLROptions o{0.01, 0.1, 100, WarmupType::kLog};
  WarmupLR log = Ok(WarmupLR::Create(o));
  EXPECT_DOUBLE_EQ(log.LearningRate(-1), 0.01);
  EXPECT_DOUBLE_EQ(log.LearningRate(0), 0.01);  // log(1) = 0
  EXPECT_DOUBLE_EQ(log.LearningRate(49), 0.01 + 0.09 * std::log(50.0) / std::log(100.0));
  EXPECT_DOUBLE_EQ(log.LearningRate(99), 0.1);  // log(100) / log(100)
  EXPECT_DOUBLE_EQ(log.LearningRate(100), 0.1);
  EXPECT_DOUBLE_EQ(log.LearningRate(1000000), 0.1);
  o.warmup_type = WarmupType::kLinear;
  WarmupLR lin = Ok(WarmupLR::Create(o));
  EXPECT_DOUBLE_EQ(lin.LearningRate(0), 0.01);
  EXPECT_DOUBLE_EQ(lin.LearningRate(99), 0.01 + 0.09 * 0.99);
  EXPECT_DOUBLE_EQ(lin.LearningRate(100), 0.1);
  EXPECT_DOUBLE_EQ(lin.LearningRate(5000), 0.1);
  // DeepSpeed raises warmup_num_steps to at least 2.
  WarmupLR one = Ok(WarmupLR::Create({0.0, 1.0, 1, WarmupType::kLinear}));
  EXPECT_DOUBLE_EQ(one.LearningRate(1), 0.5);
  EXPECT_FALSE(WarmupLR::Create({0.0, 1.0, 0, WarmupType::kLinear}).ok());
}

TEST(WarmupDecayLRTest, LinearDecayToZero) {
  WarmupDecayLROptions o{1000, {0.0, 0.1, 100, WarmupType::kLinear}};
  WarmupDecayLR s = Ok(WarmupDecayLR::Create(o));
  EXPECT_DOUBLE_EQ(s.LearningRate(-1), 0.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(0), 0.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(99), 0.1 * 0.99);
  EXPECT_DOUBLE_EQ(s.LearningRate(100), 0.1);  // (1000 - 100) / 900
  EXPECT_DOUBLE_EQ(s.LearningRate(550), 0.1 * 450.0 / 900.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(999), 0.1 / 900.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(1000), 0.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(5000), 0.0);  // clamped, never negative
  EXPECT_FALSE(WarmupDecayLR::Create({0, {}}).ok());
}

TEST(WarmupCosineLRTest, WarmupThenHalfCosineToTheFloor) {
  WarmupCosineLROptions o;
  o.lr = 0.5, o.total_num_steps = 1100, o.warmup_min_ratio = 0.1, o.warmup_num_steps = 100;
  o.cos_min_ratio = 0.01, o.warmup_type = WarmupType::kLinear;
  WarmupCosineLR s = Ok(WarmupCosineLR::Create(o));
  EXPECT_DOUBLE_EQ(s.LearningRate(-1), 0.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(0), 0.5 * 0.1);
  EXPECT_DOUBLE_EQ(s.LearningRate(99), 0.5 * (0.1 + 0.99 * 0.9));
  // First post-warm-up step: progress 1 / 1000.
  const double first = (1 + std::cos(M_PI * 0.001)) / 2;
  EXPECT_DOUBLE_EQ(s.LearningRate(100), 0.5 * (0.01 + 0.99 * first));
  EXPECT_DOUBLE_EQ(s.LearningRate(599), 0.5 * (0.01 + 0.99 * 0.5));  // half way: cos(pi/2)
  EXPECT_NEAR(s.LearningRate(1099), 0.5 * 0.01, 1e-15);              // the end: cos(pi)
  EXPECT_NEAR(s.LearningRate(100000), 0.5 * 0.01, 1e-15);            // held at the floor
  o.warmup_type = WarmupType::kLog;
  WarmupCosineLR l = Ok(WarmupCosineLR::Create(o));
  EXPECT_DOUBLE_EQ(l.LearningRate(9), 0.5 * (0.1 + 0.9 * std::log(10.0) / std::log(100.0)));
}

TEST(OneCycleTest, TriangleWithInverseMomentumThenDecay) {
  OneCycleOptions o;
  o.cycle_min_lr = 0.01, o.cycle_max_lr = 0.1, o.cycle_first_step_size = 100;
  o.cycle_second_step_size = 300, o.decay_step_size = 10, o.decay_lr_rate = 0.5;
  o.cycle_min_mom = 0.8, o.cycle_max_mom = 0.9, o.decay_mom_rate = 0.01;
  OneCycle s = Ok(OneCycle::Create(o));
  EXPECT_DOUBLE_EQ(s.LearningRate(-1), 0.01);
  EXPECT_DOUBLE_EQ(*s.Momentum(-1), 0.8);                     // the constructor sets cycle_min_mom
  EXPECT_NEAR(s.LearningRate(0), 0.01 + 0.09 * 0.01, 1e-15);  // batch 1 of a 100-step rise
  EXPECT_NEAR(*s.Momentum(0), 0.9 - 0.1 * 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(s.LearningRate(99), 0.1);  // the peak
  EXPECT_DOUBLE_EQ(*s.Momentum(99), 0.8);
  EXPECT_NEAR(s.LearningRate(249), 0.01 + 0.09 * 0.5, 1e-15);    // half way down
  EXPECT_NEAR(s.LearningRate(398), 0.01 + 0.09 / 300.0, 1e-15);  // last cycle step
  EXPECT_DOUBLE_EQ(s.LearningRate(399), 0.01);                   // the cycle closes at its start
  EXPECT_DOUBLE_EQ(*s.Momentum(399), 0.9);
  EXPECT_DOUBLE_EQ(s.LearningRate(400), 0.01 / (1 + 0.5 * 0.1));  // first decay step
  EXPECT_DOUBLE_EQ(*s.Momentum(400), 0.9 * (1 + 0.01 * 0.1));
  EXPECT_DOUBLE_EQ(s.LearningRate(1399), 0.01 / (1 + 0.5 * 100.0));
  // No decay configured: lr stays at cycle_min_lr and momentum at cycle_max_mom.
  o.decay_step_size = 0;
  OneCycle flat = Ok(OneCycle::Create(o));
  EXPECT_DOUBLE_EQ(flat.LearningRate(5000), 0.01);
  EXPECT_DOUBLE_EQ(*flat.Momentum(5000), 0.9);
  o.cycle_momentum = false;
  EXPECT_FALSE(Ok(OneCycle::Create(o)).Momentum(10).has_value());
}

// The step taken after k earlier ones runs with iteration k - 1's values (DeepSpeed steps its
// scheduler after each optimizer step); a cycled momentum comes with beta2 = 0.99.
TEST(LrScheduleTest, ForStepIsTheIterationBefore) {
  OneCycleOptions o;
  o.cycle_min_lr = 0.01, o.cycle_max_lr = 0.1, o.cycle_first_step_size = 10;
  OneCycle s = Ok(OneCycle::Create(o));
  for (int64_t k = 0; k < 30; ++k) {
    const StepHyperparams h = s.ForStep(k);
    EXPECT_EQ(h.lr, s.LearningRate(k - 1));
    ASSERT_TRUE(h.betas.has_value());
    EXPECT_EQ(h.betas->first, *s.Momentum(k - 1));
    EXPECT_EQ(h.betas->second, 0.99);
  }
  EXPECT_EQ(s.ForStep(0).lr, 0.01);  // the constructor's value: cycle_min_lr
  o.cycle_momentum = false;
  EXPECT_FALSE(Ok(OneCycle::Create(o)).ForStep(3).betas.has_value());
  LRRangeTestOptions r;
  EXPECT_FALSE(Ok(LRRangeTest::Create(r)).ForStep(3).betas.has_value());
}

TEST(OneCycleTest, StaircaseHoldsEachStair) {
  OneCycleOptions o;
  o.cycle_min_lr = 0.0, o.cycle_max_lr = 1.0, o.cycle_first_step_size = 100;
  o.cycle_first_stair_count = 4;
  OneCycle s = Ok(OneCycle::Create(o));
  EXPECT_DOUBLE_EQ(s.LearningRate(0), 0.0);    // batch 1: floor(0.04) / 4
  EXPECT_DOUBLE_EQ(s.LearningRate(24), 0.25);  // batch 25 starts the second stair
  EXPECT_DOUBLE_EQ(s.LearningRate(98), 0.75);
  EXPECT_DOUBLE_EQ(s.LearningRate(99), 1.0);    // the peak is reached, not a stair below it
  EXPECT_DOUBLE_EQ(s.LearningRate(100), 0.75);  // falling: floor(99 * 4 / 100) / 4
}

TEST(LRRangeTestTest, ContinuousAndStaircase) {
  LRRangeTest c = Ok(LRRangeTest::Create({1e-3, 100, 2.0, false}));
  EXPECT_DOUBLE_EQ(c.LearningRate(-1), 1e-3);
  EXPECT_DOUBLE_EQ(c.LearningRate(0), 1e-3 * (1 + 2.0 * 0.01));
  EXPECT_DOUBLE_EQ(c.LearningRate(99), 1e-3 * 3.0);
  EXPECT_DOUBLE_EQ(c.LearningRate(999), 1e-3 * 21.0);
  LRRangeTest s = Ok(LRRangeTest::Create({1e-3, 100, 2.0, true}));
  EXPECT_DOUBLE_EQ(s.LearningRate(0), 1e-3);
  EXPECT_DOUBLE_EQ(s.LearningRate(98), 1e-3);
  EXPECT_DOUBLE_EQ(s.LearningRate(99), 3e-3);
  EXPECT_FALSE(LRRangeTest::Create({1e-3, 0, 1.0, false}).ok());
}

}  // namespace
}  // namespace zerotrain::optim
