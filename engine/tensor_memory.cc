// A counting wrapper around LibTorch's CPU allocator (tensor_memory.h). Each allocation carries a
// small block that remembers its size and the base allocator's DataPtr; freeing the block frees
// the memory and takes its bytes off the count. And the call that hands freed pages back.
#include "engine/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <malloc.h>

#include <atomic>
#include <mutex>
#include <utility>

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

struct CountedBlock {
  c10::DataPtr base;
  int64_t bytes;
};

void FreeCounted(void* context) {
  auto* block = static_cast<CountedBlock*>(context);
  live_bytes.fetch_sub(block->bytes, std::memory_order_relaxed);
  delete block;  // the base DataPtr frees the memory
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr base = base_->allocate(n);
    void* data = base.get();
    const c10::Device device = base.device();
    auto* block = new CountedBlock{std::move(base), static_cast<int64_t>(n)};
    RaisePeak(live_bytes.fetch_add(block->bytes, std::memory_order_relaxed) + block->bytes);
    return c10::DataPtr(data, block, &FreeCounted, device);
  }

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

void ReturnFreedHostMemory() { malloc_trim(0); }

}  // namespace zerotrain::engine
