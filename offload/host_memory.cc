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
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("AllocateHostMemory: cudaHostAlloc of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(e)));
  }
  // cudaHostAlloc promises page alignment only; a larger requested alignment must be refused
  // rather than silently violated.
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(alignment) != 0) {
    cudaFreeHost(p);
    return absl::InvalidArgumentError(absl::StrCat(
        "AllocateHostMemory: cudaHostAlloc returned memory aligned to less than ", alignment,
        " bytes; use an alignment of at most the page size with use_cuda_host_alloc"));
  }
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
    cudaFreeHost(ptr);
    return;
  }
#endif
  std::free(ptr);
}

}  // namespace zerotrain::offload
