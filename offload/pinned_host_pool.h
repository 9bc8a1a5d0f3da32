// PinnedHostPool: host memory for offloaded optimizer states and parameter shards. Blocks are
// page-aligned (so they can feed O_DIRECT swap I/O) and, with use_cuda_host_alloc on a machine
// with a GPU, page-locked (so host<->device copies run asynchronously). Freed blocks are cached
// and handed out again, because cudaHostAlloc/cudaFreeHost cost milliseconds per call and an
// offloading engine asks for the same shard sizes every step.
//
// Size classes: a request is rounded up to a multiple of `alignment` and reused only for requests
// of the same rounded size. Power-of-two classes would make reuse size-independent but waste up
// to half of the pool, and pinned memory is what limit_bytes rations; the shard sizes of an
// engine repeat exactly, so exact classes reuse just as well. Cached blocks of other sizes are
// released when a new allocation would otherwise exceed the limit, or would make the pool hold
// more than 1/16 above the most it ever had in use at once: without that bound, blocks of sizes
// no longer asked for stayed for good (44 MiB of a stage 3 rank offloading to NVMe whose
// training phases allocated 108 MiB in all, issue 32).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "offload/host_memory.h"

namespace zerotrain::offload {

struct PinnedHostPoolOptions {
  // Most bytes the pool may hold (in use + cached); 0 = no limit.
  int64_t limit_bytes = 0;
  // Every block starts at a multiple of this (a power of two); 4096 suits O_DIRECT.
  int64_t alignment = 4096;
  // Page-locked memory via cudaHostAlloc. Falls back to aligned pageable memory, saying so once
  // on stderr, when built without CUDA or when no device is present.
  bool use_cuda_host_alloc = false;
};

struct PoolStats {
  int64_t bytes_held = 0;    // allocated from the system: in use + cached
  int64_t bytes_in_use = 0;  // in blocks handed out (rounded sizes)
  int64_t peak_bytes_held = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t system_allocations = 0;  // blocks that had to be allocated
  int64_t reuses = 0;              // blocks served from the cache
};

namespace internal {
struct PoolState;
}

// A block of pool memory. Move-only; its memory goes back to the pool's cache when it is
// destroyed or Reset. It keeps the pool's state alive, so it may outlive the PinnedHostPool.
class HostBlock {
 public:
  HostBlock() = default;
  HostBlock(HostBlock&& other) noexcept;
  HostBlock& operator=(HostBlock&& other) noexcept;
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  ~HostBlock();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t size() const { return size_; }          // bytes asked for
  int64_t capacity() const { return capacity_; }  // bytes usable: size rounded up to alignment
  bool empty() const { return data_ == nullptr; }
  bool pinned() const { return kind_ == HostMemoryKind::kCudaPinned && data_ != nullptr; }

  // Returns the memory to the pool now; the block is empty afterwards.
  void Reset();

 private:
  friend class PinnedHostPool;
  std::shared_ptr<internal::PoolState> pool_;
  void* data_ = nullptr;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
  HostMemoryKind kind_ = HostMemoryKind::kAligned;
};

// Thread-safe: Allocate, the statistics and HostBlock destruction may run on any thread.
class PinnedHostPool {
 public:
  // Fails with InvalidArgument on a negative limit or an alignment that is not a power of two.
  static absl::StatusOr<PinnedHostPool> Create(const PinnedHostPoolOptions& options);

  // A block of at least `bytes` (> 0). ResourceExhausted, naming the requested bytes, the held
  // bytes and the limit, when holding it would exceed limit_bytes even after releasing the cache.
  absl::StatusOr<HostBlock> Allocate(int64_t bytes);

  // Frees every cached (not in use) block.
  void ReleaseCached();

  PoolStats stats() const;
  int64_t bytes_held() const { return stats().bytes_held; }
  int64_t bytes_in_use() const { return stats().bytes_in_use; }
  int64_t peak_bytes_in_use() const { return stats().peak_bytes_in_use; }

  // Whether blocks are page-locked (cudaHostAlloc); when use_cuda_host_alloc was asked for but is
  // not in effect, fallback_reason() says why.
  bool pinned() const;
  const std::string& fallback_reason() const;
  const PinnedHostPoolOptions& options() const;

 private:
  explicit PinnedHostPool(std::shared_ptr<internal::PoolState> state);
  std::shared_ptr<internal::PoolState> state_;
};

}  // namespace zerotrain::offload
