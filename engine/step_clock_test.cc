// StepClock's lap accounting on the host clock (the event clock shares it; engine_cuda_test
// reads it on a GPU): phases land in their fields, untimed gaps nowhere, steps apart.
#include "engine/step_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace zerotrain::engine {
namespace {

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Sleeps are lower bounds; the upper slack only has to catch time landing in the wrong field
// (each sleep below is at least 10 ms, and a loaded 2-core CI machine oversleeps).
constexpr double kSlack = 0.05;

TEST(StepClock, ZeroBeforeTheFirstStep) {
  auto clock = StepClock::ForDevice(c10::Device(c10::kCPU));
  EXPECT_EQ(clock->LastStep().forward, 0);
  clock->Lap(StepPhase::kUntimed);
  Sleep(5);
  clock->Lap(StepPhase::kForward);
  EXPECT_EQ(clock->LastStep().forward, 0);  // not ended yet
}

TEST(StepClock, PhasesSumOverMicroStepsAndSkipUntimedGaps) {
  auto clock = StepClock::ForDevice(c10::Device(c10::kCPU));
  clock->Lap(StepPhase::kUntimed);
  for (int micro = 0; micro < 2; ++micro) {
    Sleep(10);
    clock->Lap(StepPhase::kForward);
    Sleep(20);
    clock->Lap(StepPhase::kBackward);
    Sleep(150);  // longer than the slack: leaking into a field would show
    clock->Lap(StepPhase::kUntimed);
  }
  Sleep(30);
  clock->Lap(StepPhase::kStep);
  clock->EndStep();
  const StepTimes t = clock->LastStep();
  EXPECT_GE(t.forward, 0.020);
  EXPECT_LT(t.forward, 0.020 + 2 * kSlack);
  EXPECT_GE(t.backward, 0.040);
  EXPECT_LT(t.backward, 0.040 + 2 * kSlack);
  EXPECT_GE(t.step, 0.030);
  EXPECT_LT(t.step, 0.030 + kSlack);
  EXPECT_EQ(t.backward_comm, 0);
  EXPECT_EQ(t.allgather, 0);
}

TEST(StepClock, NextStepStartsAtThePreviousStepsLastMark) {
  auto clock = StepClock::ForDevice(c10::Device(c10::kCPU));
  clock->Lap(StepPhase::kUntimed);
  clock->Lap(StepPhase::kStep);
  clock->EndStep();
  EXPECT_LT(clock->LastStep().step, kSlack);
  Sleep(25);  // the caller's forward of the next step
  clock->Lap(StepPhase::kForward);
  clock->Lap(StepPhase::kAllgather);
  clock->EndStep();
  const StepTimes t = clock->LastStep();
  EXPECT_GE(t.forward, 0.025);
  EXPECT_LT(t.forward, 0.025 + kSlack);
  EXPECT_EQ(t.step, 0);  // the first step's time stays with it
}

TEST(StepClock, AnUnreadStepIsReplacedByTheNext) {
  auto clock = StepClock::ForDevice(c10::Device(c10::kCPU));
  clock->Lap(StepPhase::kUntimed);
  Sleep(30);
  clock->Lap(StepPhase::kBackward);
  clock->EndStep();  // never read
  Sleep(10);
  clock->Lap(StepPhase::kBackwardComm);
  clock->EndStep();
  const StepTimes t = clock->LastStep();
  EXPECT_EQ(t.backward, 0);
  EXPECT_GE(t.backward_comm, 0.010);
  EXPECT_LT(t.backward_comm, 0.010 + kSlack);
  // Reading again returns the same step.
  EXPECT_EQ(clock->LastStep().backward_comm, t.backward_comm);
}

}  // namespace
}  // namespace zerotrain::engine
