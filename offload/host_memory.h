// Raw host allocations behind PinnedHostPool: page-locked memory from cudaHostAlloc when this
// binary was built with --config=cuda and a device is present, page-aligned pageable memory
// otherwise. Kept apart from the pool so that the CUDA calls sit behind one #ifdef in one file.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::offload {

enum class HostMemoryKind {
  kAligned,     // posix_memalign; pageable (never mlock'ed, so RLIMIT_MEMLOCK cannot bite)
  kCudaPinned,  // cudaHostAlloc; page-locked, so host<->device copies can run asynchronously
};

// Whether cudaHostAlloc is usable in this process, decided on first call: built with CUDA and
// cudaGetDeviceCount reports at least one device. `reason` says why not, when it is not.
struct CudaHostAllocSupport {
  bool available = false;
  std::string reason;
};
const CudaHostAllocSupport& CudaHostAllocAvailability();

// `bytes` (> 0) of memory aligned to `alignment` (a power of two >= sizeof(void*)) of `kind`.
// kCudaPinned requires CudaHostAllocAvailability().available. Errors name the size and cause.
absl::StatusOr<void*> AllocateHostMemory(int64_t bytes, int64_t alignment, HostMemoryKind kind);

// Returns memory from AllocateHostMemory with the same kind. Null is ignored.
void FreeHostMemory(void* ptr, HostMemoryKind kind);

}  // namespace zerotrain::offload
