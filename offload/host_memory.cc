// Aligned and CUDA page-locked host allocations. Without ZT_WITH_CUDA (no --config=cuda) the
// CUDA branch reports itself unavailable, so callers fall back to aligned memory.
#include "offload/host_memory.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zerotrain::offload {
namespace {

CudaHostAllocSupport ProbeCuda() {
  CudaHostAllocSupport s;
#ifdef ZT_WITH_CUDA
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // Clears the sticky error so that later, unrelated CUDA calls do not report it.
    cudaGetLastError();
    s.reason = absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorString(e));
  } else if (count == 0) {
    s.reason = "cudaGetDeviceCount reports no CUDA device";
  } else {
    s.available = true;
  }
#else
  s.reason = "this binary was built without CUDA (build with --config=cuda)";
#endif
  return s;
}

}  // namespace

const CudaHostAllocSupport& CudaHostAllocAvailability() {
  static const CudaHostAllocSupport* const support = new CudaHostAllocSupport(ProbeCuda());
  return *support;
}

absl::StatusOr<void*> AllocateHostMemory(int64_t bytes, int64_t alignment, HostMemoryKind kind) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateHostMemory: bytes must be positive, got ", bytes));
  }
  if (alignment < static_cast<int64_t>(sizeof(void*)) || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateHostMemory: alignment must be a power of two >= ", sizeof(void*),
                     ", got ", alignment));
  }
  if (kind == HostMemoryKind::kAligned) {
    void* p = nullptr;
    const int err = posix_memalign(&p, static_cast<size_t>(alignment), static_cast<size_t>(bytes));
    if (err != 0) {
      return absl::ResourceExhaustedError(absl::StrCat("AllocateHostMemory: posix_memalign of ",
                                                       bytes, " bytes (alignment ", alignment,
                                                       ") failed: ", std::strerror(err)));
    }
    return p;
  }
#ifdef ZT_WITH_CUDA
  if (!CudaHostAllocAvailability().available) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AllocateHostMemory: cudaHostAlloc is unavailable: ", CudaHostAllocAvailability().reason));
  }
  // cudaHostAlloc promises no alignment: on an H200 machine it returned blocks aligned to less
  // than a page for small sizes. So every pinned block is over-allocated and its start rounded up
  // to `alignment`; the word before that start keeps the pointer cudaFreeHost needs.
  const size_t word = sizeof(void*);
  const size_t total = static_cast<size_t>(bytes) + static_cast<size_t>(alignment) + word;
  void* raw = nullptr;
  const cudaError_t e = cudaHostAlloc(&raw, total, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("AllocateHostMemory: cudaHostAlloc of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(e)));
  }
  const uintptr_t mask = static_cast<uintptr_t>(alignment) - 1;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(raw) + word + mask) & ~mask;
  void* p = reinterpret_cast<void*>(start);
  static_cast<void**>(p)[-1] = raw;
  return p;
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "AllocateHostMemory: cudaHostAlloc is unavailable: ", CudaHostAllocAvailability().reason));
#endif
}

void FreeHostMemory(void* ptr, HostMemoryKind kind) {
  if (ptr == nullptr) return;
#ifdef ZT_WITH_CUDA
  if (kind == HostMemoryKind::kCudaPinned) {
    cudaFreeHost(static_cast<void**>(ptr)[-1]);
    return;
  }
#endif
  std::free(ptr);
}

}  // namespace zerotrain::offload
