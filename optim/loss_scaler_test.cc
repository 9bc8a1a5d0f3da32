// LossScaler against DeepSpeed's update rule, step by step: hysteresis, the growth window,
// consecutive hysteresis, the floor at min_loss_scale and the error beyond it, static scaling.
#include "optim/loss_scaler.h"

#include <cmath>

#include "gtest/gtest.h"

namespace zerotrain::optim {
namespace {

LossScaler Make(const LossScalerOptions& o) {
  absl::StatusOr<LossScaler> s = LossScaler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(LossScalerTest, DefaultsAreDeepSpeedsFp16Block) {
  LossScaler s = Make({});
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0);  // 2^initial_scale_power
  EXPECT_EQ(s.state().hysteresis_left, 2);
}

TEST(LossScalerTest, HysteresisDelaysTheDrop) {
  LossScalerOptions o;
  o.initial_scale_power = 10, o.hysteresis = 3;
  LossScaler s = Make(o);
  ASSERT_TRUE(s.Update(true).ok());  // hysteresis 3 -> 2
  EXPECT_EQ(s.scale(), 1024.0);
  ASSERT_TRUE(s.Update(true).ok());  // 2 -> 1
  EXPECT_EQ(s.scale(), 1024.0);
  ASSERT_TRUE(s.Update(true).ok());  // at 1: halve
  EXPECT_EQ(s.scale(), 512.0);
  ASSERT_TRUE(s.Update(true).ok());  // still 1 until a window completes: halve again
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(s.state().hysteresis_left, 1);
}

TEST(LossScalerTest, GrowsAfterEachWindowOfCleanStepsAndRefillsHysteresis) {
  LossScalerOptions o;
  o.initial_scale_power = 4, o.loss_scale_window = 5, o.hysteresis = 2;
  LossScaler s = Make(o);
  ASSERT_TRUE(s.Update(true).ok());  // iteration 0 overflows: hysteresis 2 -> 1
  EXPECT_EQ(s.state().last_overflow_iteration, 0);
  // Clean iterations 1..5: the growth comes when 5 clean steps precede the current one.
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(s.Update(false).ok());
    EXPECT_EQ(s.scale(), 16.0) << "iteration " << i;
  }
  ASSERT_TRUE(s.Update(false).ok());  // iteration 6: stable interval 5
  EXPECT_EQ(s.scale(), 32.0);
  EXPECT_EQ(s.state().hysteresis_left, 2);  // refilled when the scale grows
  for (int i = 7; i <= 10; ++i) ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 32.0);
  ASSERT_TRUE(s.Update(false).ok());  // iteration 11: stable interval 10
  EXPECT_EQ(s.scale(), 64.0);
  EXPECT_EQ(s.state().iteration, 12);
}

TEST(LossScalerTest, WithoutOverflowTheFirstGrowthIsAfterAFullWindow) {
  LossScalerOptions o;
  o.initial_scale_power = 0, o.loss_scale_window = 3;
  LossScaler s = Make(o);
  // last_overflow_iteration starts at -1: stable interval at iteration i is i.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 1.0);
  ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 2.0);
}

TEST(LossScalerTest, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScalerOptions o;
  o.initial_scale_power = 8, o.hysteresis = 2, o.consecutive_hysteresis = true;
  LossScaler s = Make(o);
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.state().hysteresis_left, 1);
  ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.state().hysteresis_left, 2);
  ASSERT_TRUE(s.Update(true).ok());  // absorbed again: no drop
  EXPECT_EQ(s.scale(), 256.0);
  ASSERT_TRUE(s.Update(true).ok());  // two in a row: drop
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScalerTest, FloorsAtMinScaleThenFailsLikeDeepSpeed) {
  LossScalerOptions o;
  o.initial_scale_power = 2, o.hysteresis = 1, o.min_loss_scale = 1.0;
  LossScaler s = Make(o);
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 2.0);
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 1.0);
  absl::Status error = s.Update(true);
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(error.message().find("min_loss_scale = 1"), std::string::npos) << error;
  // A floor that is not a power of two is reached by clamping.
  o.min_loss_scale = 3.0, o.initial_scale_power = 3;
  LossScaler t = Make(o);
  ASSERT_TRUE(t.Update(true).ok());
  ASSERT_TRUE(t.Update(true).ok());
  EXPECT_EQ(t.scale(), 3.0);
  EXPECT_FALSE(t.Update(true).ok());
  // Without raise_error_at_min_scale the scale just stays at the floor.
  o.raise_error_at_min_scale = false;
  LossScaler u = Make(o);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(u.Update(true).ok());
  EXPECT_EQ(u.scale(), 3.0);
}

TEST(LossScalerTest, StaticScaleNeverMoves) {
  LossScalerOptions o;
  o.loss_scale = 128.0;
  LossScaler s = Make(o);
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(s.Update(i % 7 == 0).ok());
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScalerTest, RejectsBadOptionsAndRestoresState) {
  LossScalerOptions o;
  o.hysteresis = 0;
  EXPECT_NE(LossScaler::Create(o).status().message().find("hysteresis = 0"), std::string::npos);
  o = LossScalerOptions();
  o.loss_scale_window = 0;
  EXPECT_FALSE(LossScaler::Create(o).ok());
  o = LossScalerOptions();
  o.loss_scale = -1;
  EXPECT_FALSE(LossScaler::Create(o).ok());
  LossScaler s = Make({});
  ASSERT_TRUE(s.Restore({4096.0, 77, 70, 1}).ok());
  EXPECT_EQ(s.scale(), 4096.0);
  ASSERT_TRUE(s.Update(true).ok());  // hysteresis_left 1: drops at once
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_FALSE(s.Restore({-1.0, 0, -1, 1}).ok());
}

}  // namespace
}  // namespace zerotrain::optim
