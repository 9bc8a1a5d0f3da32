// PinnedHostPool: exact size-class free lists under one mutex, with accounting and the limit.
#include "offload/pinned_host_pool.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "offload/memory_roles.h"
#include "tools/status_macros.h"

namespace zerotrain::offload {
namespace internal {

struct PoolState {
  PinnedHostPoolOptions options;
  HostMemoryKind kind = HostMemoryKind::kAligned;
  std::string fallback_reason;

  // Guards cached and stats. std::mutex rather than absl::Mutex: Debian's Abseil is not built
  // for ThreadSanitizer, which then reports every absl::Mutex-guarded access as a race.
  mutable std::mutex mu;
  std::map<int64_t, std::vector<void*>> cached;  // rounded size -> blocks
  PoolStats stats;

  ~PoolState() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [size, blocks] : cached) {
      for (void* p : blocks) {
        FreeHostMemory(p, kind);
        CountHostBytes(MemoryRole::kOffloadPool, -size);
      }
    }
  }

  void Return(void* p, int64_t capacity) {
    std::lock_guard<std::mutex> lock(mu);
    cached[capacity].push_back(p);
    stats.bytes_in_use -= capacity;
  }

  // Frees cached blocks, largest first, until `needed` more bytes fit under `bound`. Needs mu.
  void ReleaseCachedLocked(int64_t needed, int64_t bound) {
    while (!cached.empty()) {
      if (needed >= 0 && stats.bytes_held + needed <= bound) return;
      const auto largest = std::prev(cached.end());
      for (void* p : largest->second) {
        FreeHostMemory(p, kind);
        stats.bytes_held -= largest->first;
        CountHostBytes(MemoryRole::kOffloadPool, -largest->first);
      }
      cached.erase(largest);
    }
  }
};

}  // namespace internal

namespace {

// Said once per process: a job with many pools should not print the same line for each.
void WarnFallbackOnce(const std::string& reason) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "zerotrain offload: use_cuda_host_alloc asked for, but %s; using page-aligned "
                 "pageable host memory instead\n",
                 reason.c_str());
  });
}

}  // namespace

HostBlock::HostBlock(HostBlock&& other) noexcept { *this = std::move(other); }

HostBlock& HostBlock::operator=(HostBlock&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    kind_ = other.kind_;
  }
  return *this;
}

HostBlock::~HostBlock() { Reset(); }

void HostBlock::Reset() {
  if (data_ != nullptr) pool_->Return(data_, capacity_);
  pool_.reset();
  data_ = nullptr;
  size_ = capacity_ = 0;
}

PinnedHostPool::PinnedHostPool(std::shared_ptr<internal::PoolState> state)
    : state_(std::move(state)) {}

absl::StatusOr<PinnedHostPool> PinnedHostPool::Create(const PinnedHostPoolOptions& options) {
  if (options.limit_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PinnedHostPool: limit_bytes must be >= 0 (0 = no limit), got ", options.limit_bytes));
  }
  if (options.alignment < static_cast<int64_t>(sizeof(void*)) ||
      (options.alignment & (options.alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PinnedHostPool: alignment must be a power of two >= ", sizeof(void*),
                     ", got ", options.alignment));
  }
  auto state = std::make_shared<internal::PoolState>();
  state->options = options;
  if (options.use_cuda_host_alloc) {
    const CudaHostAllocSupport& cuda = CudaHostAllocAvailability();
    if (cuda.available) {
      state->kind = HostMemoryKind::kCudaPinned;
    } else {
      state->fallback_reason = cuda.reason;
      WarnFallbackOnce(cuda.reason);
    }
  }
  return PinnedHostPool(std::move(state));
}

absl::StatusOr<HostBlock> PinnedHostPool::Allocate(int64_t bytes) {
  internal::PoolState& s = *state_;
  const int64_t align = s.options.alignment;
  if (bytes <= 0 || bytes > INT64_MAX - align) {
    return absl::InvalidArgumentError(
        absl::StrCat("PinnedHostPool::Allocate: bytes must be positive, got ", bytes));
  }
  const int64_t rounded = (bytes + align - 1) / align * align;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.cached.find(rounded);
    if (it != s.cached.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) s.cached.erase(it);
      ++s.stats.reuses;
    } else {
      // The cache never holds more than 1/16 above the most ever in use at once (this block
      // included): freed blocks of sizes no longer asked for would otherwise stay for good. Nor,
      // with a limit, more than the limit allows.
      const int64_t limit = s.options.limit_bytes;
      const int64_t in_use = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use + rounded);
      const int64_t bound = in_use + in_use / 16;
      s.ReleaseCachedLocked(rounded, limit > 0 ? std::min(bound, limit) : bound);
      if (limit > 0 && s.stats.bytes_held + rounded > limit) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "PinnedHostPool: cannot allocate ", bytes, " bytes (", rounded, " rounded up to ",
            align, "-byte alignment): the pool holds ", s.stats.bytes_held, " bytes (",
            s.stats.bytes_in_use, " in use) and limit_bytes is ", limit));
      }
      // Allocated under the lock so that two racing requests cannot both pass the limit check;
      // the cost is paid once per size, after which the cache serves it.
      ZT_ASSIGN_OR_RETURN(p, AllocateHostMemory(rounded, align, s.kind));
      s.stats.bytes_held += rounded;
      CountHostBytes(MemoryRole::kOffloadPool, rounded);
      ++s.stats.system_allocations;
      s.stats.peak_bytes_held = std::max(s.stats.peak_bytes_held, s.stats.bytes_held);
    }
    s.stats.bytes_in_use += rounded;
    s.stats.peak_bytes_in_use = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use);
  }
  HostBlock block;
  block.pool_ = state_;
  block.data_ = p;
  block.size_ = bytes;
  block.capacity_ = rounded;
  block.kind_ = s.kind;
  return block;
}

void PinnedHostPool::ReleaseCached() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->ReleaseCachedLocked(/*needed=*/-1, /*bound=*/0);
}

PoolStats PinnedHostPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

bool PinnedHostPool::pinned() const { return state_->kind == HostMemoryKind::kCudaPinned; }

const std::string& PinnedHostPool::fallback_reason() const { return state_->fallback_reason; }

const PinnedHostPoolOptions& PinnedHostPool::options() const { return state_->options; }

}  // namespace zerotrain::offload
