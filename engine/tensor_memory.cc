// A counting wrapper around LibTorch's CPU allocator (tensor_memory.h). A table by address keeps
// each allocation's size, role (offload/memory_roles.h) and where its memory came from: a block
// of ours (MappedBlockCache) when large, else the base allocator's DataPtr; freeing takes its
// bytes off the count and the role, and frees the memory. And the call that hands freed pages
// back.
#include "engine/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "engine/mapped_block_cache.h"
#include "offload/memory_roles.h"

namespace zerotrain::engine {
namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<bool> installed{false};

void RaisePeak(int64_t now) {
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// From this size up, blocks are mapped by us rather than by glibc: glibc's own initial mapping
// threshold, which it raises (up to 32 MiB) after freeing a mapped block; ours stays.
constexpr size_t kMappedFromBytes = 128 << 10;
// How far mapped blocks may stand above the most ever live at once (mapped_block_cache.h), as a
// fraction of it. On the 101M-parameter GPT at stage 3 (950 MiB live at most, layers of 48 MiB)
// 1/16 re-maps about 360 MiB a step, 1/8 240 and 1/32 830, against 1.7 GiB with a plain 64 MiB
// cache of recent blocks, which cost 30% of the step's time in page faults.
constexpr double kSlack = 1.0 / 16;

MappedBlockCache& Cache() {
  static auto* const cache = new MappedBlockCache(kSlack);  // never destroyed: see Blocks()
  return *cache;
}

struct CountedBlock {
  c10::DataPtr base;  // empty for a mapped block
  int64_t bytes;
  offload::MemoryRole role;  // the allocating thread's, so the free is taken off the same role
};

// Every counted block by its address. The DataPtr's context must be the data pointer itself:
// LibTorch's raw_allocate (which some CPU kernels call) asserts it and frees through
// raw_deleter() with that pointer alone.
std::mutex blocks_mu;
std::unordered_map<void*, CountedBlock>& Blocks() {
  static auto* const blocks = new std::unordered_map<void*, CountedBlock>;
  return *blocks;
}

void FreeCounted(void* data) {
  c10::DataPtr base;  // freed after the lock is released
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(blocks_mu);
    auto it = Blocks().find(data);
    if (it == Blocks().end()) return;  // never counted: nothing of ours to free
    bytes = it->second.bytes;
    live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    offload::CountHostBytes(it->second.role, -bytes);
    base = std::move(it->second.base);
    Blocks().erase(it);
  }
  if (base.get() == nullptr) Cache().Give(data, static_cast<size_t>(bytes));
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr base;
    void* data = n >= kMappedFromBytes ? Cache().Take(n) : nullptr;
    if (data == nullptr) {  // small, or the mapping refused: the base allocator says why
      base = base_->allocate(n);
      data = base.get();
      if (data == nullptr) return base;  // zero bytes: nothing to count or to look up
    }
    const c10::Device device(c10::DeviceType::CPU);
    const auto bytes = static_cast<int64_t>(n);
    const offload::MemoryRole role = offload::CurrentMemoryRole();
    {
      std::lock_guard<std::mutex> lock(blocks_mu);
      Blocks().emplace(data, CountedBlock{std::move(base), bytes, role});
    }
    RaisePeak(live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes);
    offload::CountHostBytes(role, bytes);
    return c10::DataPtr(data, data, &FreeCounted, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &FreeCounted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void InstallCpuTensorCounter() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never freed: tensors alive at exit still point at it through their deleters.
    static auto* counting = new CountingCpuAllocator(c10::GetCPUAllocator());
    // Above the default's priority (0), so it replaces the allocator that at::empty uses.
    c10::SetCPUAllocator(counting, /*priority=*/1);
    installed.store(true);
  });
}

bool CpuTensorCounterInstalled() { return installed.load(); }

int64_t CpuTensorBytes() { return live_bytes.load(std::memory_order_relaxed); }

int64_t CpuTensorPeakBytes() { return peak_bytes.load(std::memory_order_relaxed); }

void ResetCpuTensorPeak() { peak_bytes.store(live_bytes.load(std::memory_order_relaxed)); }

int64_t ResidentHostBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  const int read = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return read == 2 ? static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) : -1;
}

void ReturnFreedHostMemory() {
  Cache().Release();
  malloc_trim(0);
}

void ReturnIdleHostMemory() {
  Cache().ReleaseIdle();
  malloc_trim(0);
}

}  // namespace zerotrain::engine
