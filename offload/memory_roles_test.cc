// The role counters: scopes tag allocations and nest, and the peak keeps the split it had when
// it was reached, not the split of a later, smaller total.
#include "offload/memory_roles.h"

#include <thread>

#include "gtest/gtest.h"

namespace zerotrain::offload {
namespace {

int64_t Bytes(const HostBytesByRole& b, MemoryRole r) { return b.bytes[static_cast<int>(r)]; }

TEST(MemoryRolesTest, ScopesTagThisThreadAndNest) {
  EXPECT_EQ(CurrentMemoryRole(), MemoryRole::kOther);
  {
    MemoryRoleScope outer(MemoryRole::kActivations);
    EXPECT_EQ(CurrentMemoryRole(), MemoryRole::kActivations);
    {
      MemoryRoleScope inner(MemoryRole::kGradientBuckets);
      EXPECT_EQ(CurrentMemoryRole(), MemoryRole::kGradientBuckets);
      MemoryRole elsewhere = MemoryRole::kStaging;
      std::thread([&] { elsewhere = CurrentMemoryRole(); }).join();
      EXPECT_EQ(elsewhere, MemoryRole::kOther);  // another thread keeps its own tag
    }
    EXPECT_EQ(CurrentMemoryRole(), MemoryRole::kActivations);
  }
  EXPECT_EQ(CurrentMemoryRole(), MemoryRole::kOther);
}

TEST(MemoryRolesTest, ThePeakKeepsItsSplit) {
  const HostBytesByRole base = LiveHostBytes();
  ResetHostBytesPeak();
  CountHostBytes(MemoryRole::kGatheredParameters, 1000);
  CountHostBytes(MemoryRole::kOptimizerStates, 500);
  CountHostBytes(MemoryRole::kGatheredParameters, -1000);
  CountHostBytes(MemoryRole::kActivations, 700);  // 1200 live: below the 1500 peak

  const HostBytesByRole live = LiveHostBytes();
  EXPECT_EQ(live.total - base.total, 1200);
  EXPECT_EQ(Bytes(live, MemoryRole::kActivations) - Bytes(base, MemoryRole::kActivations), 700);

  const HostBytesByRole peak = PeakHostBytes();
  EXPECT_EQ(peak.total - base.total, 1500);
  EXPECT_EQ(
      Bytes(peak, MemoryRole::kGatheredParameters) - Bytes(base, MemoryRole::kGatheredParameters),
      1000);
  EXPECT_EQ(Bytes(peak, MemoryRole::kActivations) - Bytes(base, MemoryRole::kActivations), 0);
  EXPECT_EQ(peak.Largest(), MemoryRole::kGatheredParameters);

  ResetHostBytesPeak();  // a new window starts at what is live
  EXPECT_EQ(PeakHostBytes().total, LiveHostBytes().total);
  EXPECT_EQ(PeakHostBytes().Largest(), live.Largest());
  CountHostBytes(MemoryRole::kActivations, -700);
  CountHostBytes(MemoryRole::kOptimizerStates, -500);
  EXPECT_EQ(LiveHostBytes().total, base.total);
}

TEST(MemoryRolesTest, EveryRoleHasAName) {
  for (int r = 0; r < kNumMemoryRoles; ++r) {
    EXPECT_STRNE(MemoryRoleName(static_cast<MemoryRole>(r)), "?") << r;
  }
  EXPECT_STREQ(MemoryRoleName(MemoryRole::kGradientBuckets), "gradient buckets");
}

}  // namespace
}  // namespace zerotrain::offload
