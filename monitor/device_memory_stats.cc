// CUDA allocator statistics through c10::getDeviceAllocator; LibTorch errors become Status.
#include "monitor/device_memory_stats.h"

#include <ATen/Context.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerotrain::monitor {
namespace {

absl::Status CheckDevice(int device) {
  if (!torch::cuda::is_available()) {
    return absl::UnavailableError("no CUDA: built without --config=cuda or no device visible");
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device: ", device, " (", count, " CUDA devices visible)"));
  }
  // The caching allocator knows the devices only after CUDA's lazy initialisation: before it
  // (nothing allocated yet), its statistics calls throw "Invalid device argument".
  try {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  } catch (const c10::Error& e) {
    return absl::UnavailableError(
        absl::StrCat("initialising CUDA for device ", device, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceMemoryStats> ReadCudaMemoryStats(int device) {
  if (auto s = CheckDevice(device); !s.ok()) return s;
  try {
    const auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)
                           ->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    DeviceMemoryStats out;
    out.device = device;
    out.allocated_bytes = stats.allocated_bytes[kAll].current;
    out.peak_allocated_bytes = stats.allocated_bytes[kAll].peak;
    out.reserved_bytes = stats.reserved_bytes[kAll].current;
    out.peak_reserved_bytes = stats.reserved_bytes[kAll].peak;
    out.num_ooms = stats.num_ooms;
    return out;
  } catch (const c10::Error& e) {
    return absl::UnavailableError(absl::StrCat("CUDA allocator statistics for device ", device,
                                               ": ", e.what_without_backtrace()));
  }
}

absl::Status ResetCudaPeak(int device) {
  if (auto s = CheckDevice(device); !s.ok()) return s;
  try {
    c10::getDeviceAllocator(c10::DeviceType::CUDA)
        ->resetPeakStats(static_cast<c10::DeviceIndex>(device));
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::UnavailableError(
        absl::StrCat("resetting CUDA peak for device ", device, ": ", e.what_without_backtrace()));
  }
}

std::string DeviceMemoryLine(const DeviceMemoryStats& s) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return absl::StrFormat(
      "cuda:%d allocated %.2f GiB (peak %.2f), reserved %.2f GiB (peak %.2f), OOMs %d", s.device,
      s.allocated_bytes / kGiB, s.peak_allocated_bytes / kGiB, s.reserved_bytes / kGiB,
      s.peak_reserved_bytes / kGiB, s.num_ooms);
}

}  // namespace zerotrain::monitor
