// The role counters of memory_roles.h: one atomic per role and a total; the split at the peak is
// copied under a lock, only when an allocation raises the peak.
#include "offload/memory_roles.h"

#include <atomic>
#include <mutex>

namespace zerotrain::offload {
namespace {

thread_local MemoryRole current_role = MemoryRole::kOther;

std::array<std::atomic<int64_t>, kNumMemoryRoles> live_by_role{};
std::atomic<int64_t> live_total{0};
std::atomic<int64_t> peak_total{0};

std::mutex& PeakMutex() {
  static std::mutex* const mu = new std::mutex;
  return *mu;
}
HostBytesByRole peak_split;  // guarded by PeakMutex()

HostBytesByRole ReadLive() {
  HostBytesByRole out;
  for (int r = 0; r < kNumMemoryRoles; ++r) {
    out.bytes[r] = live_by_role[r].load(std::memory_order_relaxed);
  }
  out.total = live_total.load(std::memory_order_relaxed);
  return out;
}

}  // namespace

const char* MemoryRoleName(MemoryRole role) {
  switch (role) {
    case MemoryRole::kOther:
      return "other";
    case MemoryRole::kParameters:
      return "parameters";
    case MemoryRole::kGradients:
      return "gradients";
    case MemoryRole::kGatheredParameters:
      return "gathered parameters";
    case MemoryRole::kGradientBuckets:
      return "gradient buckets";
    case MemoryRole::kOptimizerStates:
      return "optimizer states";
    case MemoryRole::kStaging:
      return "staging";
    case MemoryRole::kOffloadPool:
      return "offload pool";
    case MemoryRole::kActivations:
      return "activations";
  }
  return "?";
}

MemoryRole CurrentMemoryRole() { return current_role; }

MemoryRoleScope::MemoryRoleScope(MemoryRole role) : previous_(current_role) { current_role = role; }
MemoryRoleScope::~MemoryRoleScope() { current_role = previous_; }

MemoryRole HostBytesByRole::Largest() const {
  int best = 0;
  for (int r = 1; r < kNumMemoryRoles; ++r) {
    if (bytes[r] > bytes[best]) best = r;
  }
  return static_cast<MemoryRole>(best);
}

void CountHostBytes(MemoryRole role, int64_t delta) {
  live_by_role[static_cast<int>(role)].fetch_add(delta, std::memory_order_relaxed);
  const int64_t now = live_total.fetch_add(delta, std::memory_order_relaxed) + delta;
  if (delta <= 0 || now <= peak_total.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(PeakMutex());
  if (now <= peak_total.load(std::memory_order_relaxed)) return;
  peak_total.store(now, std::memory_order_relaxed);
  peak_split = ReadLive();
  peak_split.total = now;
}

HostBytesByRole LiveHostBytes() { return ReadLive(); }

HostBytesByRole PeakHostBytes() {
  std::lock_guard<std::mutex> lock(PeakMutex());
  HostBytesByRole out = peak_split;
  out.total = peak_total.load(std::memory_order_relaxed);
  return out;
}

void ResetHostBytesPeak() {
  std::lock_guard<std::mutex> lock(PeakMutex());
  peak_split = ReadLive();
  peak_total.store(peak_split.total, std::memory_order_relaxed);
}

}  // namespace zerotrain::offload
