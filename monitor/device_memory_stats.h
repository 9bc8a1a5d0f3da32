// CUDA caching-allocator statistics (allocated/reserved now and peak) for --memory_summary and the
// metrics. Reached through c10's device-agnostic allocator registry, so this target links only
// LibTorch's CPU libraries; the numbers exist when the binary also links //trainer's CUDA deps
// (--config=cuda), which registers the CUDA allocator.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::monitor {

struct DeviceMemoryStats {
  int device = 0;
  int64_t allocated_bytes = 0;       // held by live tensors
  int64_t peak_allocated_bytes = 0;  // since start or the last ResetCudaPeak
  int64_t reserved_bytes = 0;        // held by the caching allocator, in use or cached
  int64_t peak_reserved_bytes = 0;
  int64_t num_ooms = 0;
};

// Unavailable (saying why) when CUDA is not built in or no device is visible.
absl::StatusOr<DeviceMemoryStats> ReadCudaMemoryStats(int device);

// Starts a new peak window, e.g. per step.
absl::Status ResetCudaPeak(int device);

// "cuda:0 allocated 1.2 GiB (peak 3.4), reserved 4.0 GiB (peak 4.0), OOMs 0"
std::string DeviceMemoryLine(const DeviceMemoryStats& stats);

}  // namespace zerotrain::monitor
