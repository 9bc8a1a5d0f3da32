// PhaseMemory: each phase keeps its own RSS and allocated peaks (a large buffer touched and freed
// in one phase does not show in the next), the split by role at the peak, the larger peak when a
// phase comes again, and the table and the collective's layout.
#include "monitor/phase_memory.h"

#include <algorithm>
#include <cstdlib>

#include "gtest/gtest.h"
#include "monitor/memory_stats.h"
#include "offload/memory_roles.h"

namespace zerotrain::monitor {
namespace {

constexpr int64_t kBig = 96LL << 20;

// Touches `bytes` of fresh memory (glibc maps a block this large, and unmaps it on free) and
// counts it under `role` while it lives.
void TouchAndFree(int64_t bytes, offload::MemoryRole role) {
  // Through a volatile pointer, so the compiler cannot drop the block as unused.
  volatile char* p = static_cast<char*>(std::malloc(bytes));
  ASSERT_NE(p, nullptr);
  for (int64_t i = 0; i < bytes; i += 4096) p[i] = 1;
  offload::CountHostBytes(role, bytes);
  offload::CountHostBytes(role, -bytes);
  std::free(const_cast<char*>(p));
}

const PhasePeak& Of(const PhasePeaks& peaks, MemoryPhase phase) {
  return peaks[static_cast<int>(phase)];
}

TEST(PhaseMemoryTest, EachPhaseHasItsOwnPeaks) {
  PhaseMemory phases(/*cuda_device=*/-1);
  ASSERT_TRUE(phases.rss_per_phase()) << "this Linux refuses /proc/self/clear_refs";
  phases.Enter(MemoryPhase::kForward);
  TouchAndFree(kBig, offload::MemoryRole::kGatheredParameters);
  phases.Enter(MemoryPhase::kBackward);
  TouchAndFree(kBig / 8, offload::MemoryRole::kGradientBuckets);
  phases.Enter(MemoryPhase::kStep);

  const PhasePeaks peaks = phases.Peaks();
  const PhasePeak& forward = Of(peaks, MemoryPhase::kForward);
  const PhasePeak& backward = Of(peaks, MemoryPhase::kBackward);
  ASSERT_TRUE(forward.entered && backward.entered);
  EXPECT_FALSE(Of(peaks, MemoryPhase::kEval).entered);
  EXPECT_GE(forward.rss_bytes - backward.rss_bytes, kBig / 2);
  EXPECT_EQ(forward.allocated.Largest(), offload::MemoryRole::kGatheredParameters);
  EXPECT_EQ(backward.allocated.Largest(), offload::MemoryRole::kGradientBuckets);
  EXPECT_GE(forward.allocated.total - backward.allocated.total, kBig - kBig / 8);
  EXPECT_EQ(RunPeak(peaks).rss_bytes, std::max(forward.rss_bytes, peaks[0].rss_bytes));
}

TEST(PhaseMemoryTest, APhaseEnteredAgainKeepsItsLargerPeak) {
  PhaseMemory phases(-1);
  phases.Enter(MemoryPhase::kForward);
  TouchAndFree(kBig, offload::MemoryRole::kActivations);
  phases.Enter(MemoryPhase::kBackward);
  phases.Enter(MemoryPhase::kForward);  // a smaller second micro-batch
  TouchAndFree(kBig / 16, offload::MemoryRole::kActivations);
  phases.Enter(MemoryPhase::kEnd);
  const PhasePeaks peaks = phases.Peaks();
  EXPECT_GE(Of(peaks, MemoryPhase::kForward).allocated.total -
                Of(peaks, MemoryPhase::kBackward).allocated.total,
            kBig - 1);
  EXPECT_GE(Of(peaks, MemoryPhase::kForward).rss_bytes - Of(peaks, MemoryPhase::kEnd).rss_bytes,
            kBig / 2);
}

TEST(PhaseMemoryTest, RoundTripsThroughDoublesAndPrintsEnteredPhases) {
  PhasePeaks peaks{};
  PhasePeak& save = peaks[static_cast<int>(MemoryPhase::kCheckpointSave)];
  save.entered = true;
  save.rss_bytes = 300LL << 20;
  save.allocated.bytes[static_cast<int>(offload::MemoryRole::kOptimizerStates)] = 200LL << 20;
  save.allocated.total = 250LL << 20;
  save.device_reserved_bytes = 7;
  const PhasePeaks back = FromDoubles(ToDoubles(peaks));
  const PhasePeak& b = back[static_cast<int>(MemoryPhase::kCheckpointSave)];
  EXPECT_TRUE(b.entered);
  EXPECT_FALSE(back[0].entered);
  EXPECT_EQ(b.rss_bytes, save.rss_bytes);
  EXPECT_EQ(b.allocated.total, save.allocated.total);
  EXPECT_EQ(b.allocated.bytes, save.allocated.bytes);
  EXPECT_EQ(b.device_reserved_bytes, 7);
  EXPECT_EQ(ToDoubles(peaks).size(), static_cast<size_t>(kNumMemoryPhases * kPhaseFields));

  const std::string table = PhaseTable(back, /*device=*/false, "  ");
  EXPECT_NE(table.find("  checkpoint save        300              250  optimizer states 200"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("forward"), std::string::npos) << table;
  EXPECT_EQ(table.find("cuda"), std::string::npos) << table;

  const std::vector<Scalar> row = PhaseScalars(back, /*device=*/true);
  ASSERT_EQ(row.size(), 4u);  // one phase entered, four columns
  EXPECT_EQ(row[0].name, "peak_rss_mb_checkpoint_save");
  EXPECT_DOUBLE_EQ(row[0].value, 300);
  EXPECT_EQ(row[3].name, "device_peak_reserved_mb_checkpoint_save");
  const std::vector<std::string> columns = PhaseColumns(/*device=*/false);
  EXPECT_EQ(columns.size(), static_cast<size_t>(2 * kNumMemoryPhases));
  EXPECT_NE(std::find(columns.begin(), columns.end(), row[1].name), columns.end());
}

}  // namespace
}  // namespace zerotrain::monitor
