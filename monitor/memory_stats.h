// Host memory of this process: resident set size now and its high-water mark, and the text the
// trainer prints for --memory_summary. CUDA allocator statistics are added by the caller as
// extra lines (they need LibTorch's CUDA library, which this CPU-only target does not link).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::monitor {

struct MemoryUsage {
  int64_t rss_bytes = 0;       // VmRSS
  int64_t peak_rss_bytes = 0;  // VmHWM: the most this process has had resident since it started
};

// Reads /proc/self/status; where that is missing (not Linux), the peak comes from getrusage and
// the current RSS is reported as 0.
absl::StatusOr<MemoryUsage> ReadMemoryUsage();

// Sets the high-water mark (VmHWM) to the RSS now, so the next reading is the peak since this
// call: "5" to /proc/self/clear_refs (Linux 4.0 and later). Unavailable where that is refused.
absl::Status ResetPeakRss();

// The "kB" fields of a /proc/<pid>/status text, in bytes (exposed for the tests).
absl::StatusOr<MemoryUsage> ParseProcStatus(const std::string& status_text);

// A few lines: "host RSS now X MiB, peak Y MiB", then each of `extra_lines` as given (e.g. the
// CUDA allocator's allocated/reserved/peak, the engine's model-state bytes).
std::string MemorySummary(const MemoryUsage& usage,
                          const std::vector<std::string>& extra_lines = {});

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace zerotrain::monitor
