// PhaseMemory's windows (phase_memory.h): at each Enter the open phase's peaks are read and kept,
// then the RSS high-water mark, the role counters' peak and the CUDA allocator's peaks restart.
#include "monitor/phase_memory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "monitor/device_memory_stats.h"
#include "monitor/memory_stats.h"

namespace zerotrain::monitor {
namespace {

constexpr const char* kNames[kNumMemoryPhases] = {
    "start-up", "construction", "partitioning", "checkpoint load", "eval",
    "forward",  "backward",     "step",         "checkpoint save", "end"};
constexpr const char* kKeys[kNumMemoryPhases] = {
    "startup", "construction", "partitioning", "checkpoint_load", "eval",
    "forward", "backward",     "step",         "checkpoint_save", "end"};

}  // namespace

const char* MemoryPhaseName(MemoryPhase phase) { return kNames[static_cast<int>(phase)]; }
const char* MemoryPhaseKey(MemoryPhase phase) { return kKeys[static_cast<int>(phase)]; }

PhaseMemory::PhaseMemory(int cuda_device) : cuda_device_(cuda_device), rss_per_phase_(false) {
  // Start-up so far is the process's peak; the reset then opens a window for the rest of it. A
  // reset refused here is refused for good: every later reading is the process's peak.
  recorded_[0] = ReadCurrent();
  rss_per_phase_ = ResetPeakRss().ok();
}

PhasePeak PhaseMemory::ReadCurrent() const {
  PhasePeak p;
  p.entered = true;
  if (auto usage = ReadMemoryUsage(); usage.ok()) p.rss_bytes = usage->peak_rss_bytes;
  p.allocated = offload::PeakHostBytes();
  if (cuda_device_ >= 0) {
    if (auto d = ReadCudaMemoryStats(cuda_device_); d.ok()) {
      p.device_allocated_bytes = d->peak_allocated_bytes;
      p.device_reserved_bytes = d->peak_reserved_bytes;
    }
  }
  return p;
}

void PhaseMemory::Enter(MemoryPhase phase) {
  PhasePeak& open = recorded_[static_cast<int>(current_)];
  open = MaxPeak(open, ReadCurrent());
  current_ = phase;
  if (rss_per_phase_) rss_per_phase_ = ResetPeakRss().ok();
  offload::ResetHostBytesPeak();
  if (cuda_device_ >= 0) (void)ResetCudaPeak(cuda_device_);
}

PhasePeaks PhaseMemory::Peaks() const {
  PhasePeaks out = recorded_;
  PhasePeak& open = out[static_cast<int>(current_)];
  open = MaxPeak(open, ReadCurrent());
  return out;
}

PhasePeak MaxPeak(const PhasePeak& a, const PhasePeak& b) {
  if (!a.entered) return b;
  if (!b.entered) return a;
  PhasePeak out = a.allocated.total >= b.allocated.total ? a : b;
  out.rss_bytes = std::max(a.rss_bytes, b.rss_bytes);
  out.device_allocated_bytes = std::max(a.device_allocated_bytes, b.device_allocated_bytes);
  out.device_reserved_bytes = std::max(a.device_reserved_bytes, b.device_reserved_bytes);
  return out;
}

PhasePeak RunPeak(const PhasePeaks& peaks) {
  PhasePeak out;
  for (const PhasePeak& p : peaks) out = MaxPeak(out, p);
  return out;
}

std::vector<double> ToDoubles(const PhasePeaks& peaks) {
  std::vector<double> v;
  v.reserve(kNumMemoryPhases * kPhaseFields);
  for (const PhasePeak& p : peaks) {
    v.push_back(p.entered ? 1 : 0);
    v.push_back(static_cast<double>(p.rss_bytes));
    v.push_back(static_cast<double>(p.allocated.total));
    v.push_back(static_cast<double>(p.device_allocated_bytes));
    v.push_back(static_cast<double>(p.device_reserved_bytes));
    for (int64_t b : p.allocated.bytes) v.push_back(static_cast<double>(b));
  }
  return v;
}

PhasePeaks FromDoubles(const std::vector<double>& v) {
  PhasePeaks out{};
  for (int i = 0; i < kNumMemoryPhases && (i + 1) * kPhaseFields <= static_cast<int>(v.size());
       ++i) {
    const double* f = v.data() + i * kPhaseFields;
    PhasePeak& p = out[i];
    p.entered = f[0] > 0;
    p.rss_bytes = static_cast<int64_t>(f[1]);
    p.allocated.total = static_cast<int64_t>(f[2]);
    p.device_allocated_bytes = static_cast<int64_t>(f[3]);
    p.device_reserved_bytes = static_cast<int64_t>(f[4]);
    for (int r = 0; r < offload::kNumMemoryRoles; ++r) {
      p.allocated.bytes[r] = static_cast<int64_t>(f[5 + r]);
    }
  }
  return out;
}

std::vector<std::string> PhaseColumns(bool device) {
  std::vector<std::string> out;
  for (const char* key : kKeys) {
    out.push_back(absl::StrCat("peak_rss_mb_", key));
    out.push_back(absl::StrCat("peak_allocated_mb_", key));
    if (device) {
      out.push_back(absl::StrCat("device_peak_allocated_mb_", key));
      out.push_back(absl::StrCat("device_peak_reserved_mb_", key));
    }
  }
  return out;
}

std::vector<Scalar> PhaseScalars(const PhasePeaks& peaks, bool device) {
  std::vector<Scalar> out;
  for (int i = 0; i < kNumMemoryPhases; ++i) {
    const PhasePeak& p = peaks[i];
    if (!p.entered) continue;
    out.push_back({absl::StrCat("peak_rss_mb_", kKeys[i]), p.rss_bytes / kMiB});
    out.push_back({absl::StrCat("peak_allocated_mb_", kKeys[i]), p.allocated.total / kMiB});
    if (device) {
      out.push_back(
          {absl::StrCat("device_peak_allocated_mb_", kKeys[i]), p.device_allocated_bytes / kMiB});
      out.push_back(
          {absl::StrCat("device_peak_reserved_mb_", kKeys[i]), p.device_reserved_bytes / kMiB});
    }
  }
  return out;
}

std::string PhaseTable(const PhasePeaks& peaks, bool device, const std::string& indent) {
  std::string out =
      absl::StrCat(indent, "phase             RSS peak   allocated peak, largest part",
                   device ? "   | cuda allocated / reserved" : "", "\n");
  for (int i = 0; i < kNumMemoryPhases; ++i) {
    const PhasePeak& p = peaks[i];
    if (!p.entered) continue;
    const offload::MemoryRole largest = p.allocated.Largest();
    absl::StrAppendFormat(&out, "%s%-16s %9.0f %16.0f  %s %.0f", indent, kNames[i],
                          p.rss_bytes / kMiB, p.allocated.total / kMiB,
                          offload::MemoryRoleName(largest),
                          p.allocated.bytes[static_cast<int>(largest)] / kMiB);
    if (device) {
      absl::StrAppendFormat(&out, "   | %.0f / %.0f", p.device_allocated_bytes / kMiB,
                            p.device_reserved_bytes / kMiB);
    }
    out += "\n";
  }
  return out;
}

}  // namespace zerotrain::monitor
