// The counting allocator behind AllocationCounter: it forwards to the allocator it replaced and
// keeps the size of every live allocation, so frees are counted too.
#include "recompute/allocation_counter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

namespace zerotrain::recompute {
namespace {

// Above the priorities LibTorch registers its own CPU allocators with, so installing wins.
constexpr uint8_t kPriority = 200;

std::atomic<int64_t> live{0};
std::atomic<int64_t> peak{0};
std::atomic<bool> installed{false};

// LibTorch's raw_allocate needs "simple" DataPtrs (context == data), so the size and the wrapped
// allocator's deleter of each live allocation are looked up by address when it is freed.
struct Allocation {
  int64_t bytes;
  c10::DeleterFnPtr deleter;
};
std::mutex table_mutex;
std::unordered_map<void*, Allocation>& Table() {
  static auto* table = new std::unordered_map<void*, Allocation>();
  return *table;
}

// The wrapped allocator's raw deleter: code that frees with raw_deleter() of whichever allocator
// is current (oneDNN's scratch buffers) may hand back memory allocated before the install.
std::atomic<c10::DeleterFnPtr> fallback_deleter{nullptr};

void Release(void* data) {
  if (data == nullptr) return;
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto it = Table().find(data);
    if (it == Table().end()) {
      c10::DeleterFnPtr fallback = fallback_deleter.load();
      TORCH_CHECK(fallback != nullptr,
                  "AllocationCounter: cannot free an address it never "
                  "allocated: the wrapped allocator has no raw deleter");
      fallback(data);
      return;
    }
    a = it->second;
    Table().erase(it);
  }
  live.fetch_sub(a.bytes);
  a.deleter(data);
}

class CountingAllocator : public c10::Allocator {
 public:
  void set_inner(c10::Allocator* inner) { inner_ = inner; }

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero bytes: nothing to count or free
    TORCH_CHECK(inner.get_context() == data,
                "AllocationCounter: the wrapped CPU allocator's pointers carry a context");
    c10::DeleterFnPtr deleter = inner.get_deleter();
    inner.release_context();
    const auto bytes = static_cast<int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(table_mutex);
      Table()[data] = Allocation{bytes, deleter};
    }
    int64_t now = live.fetch_add(bytes) + bytes;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    return c10::DataPtr(data, data, &Release, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* inner_ = nullptr;
};

// Never destroyed: storage allocated through it may outlive any counter.
CountingAllocator& Wrapper() {
  static auto* wrapper = new CountingAllocator();
  return *wrapper;
}

}  // namespace

AllocationCounter::AllocationCounter() : previous_(c10::GetCPUAllocator()) {
  TORCH_CHECK(!installed.exchange(true), "AllocationCounter: another counter is installed");
  live = 0;
  peak = 0;
  Wrapper().set_inner(previous_);
  fallback_deleter = previous_->raw_deleter();
  c10::SetCPUAllocator(&Wrapper(), kPriority);
  TORCH_CHECK(c10::GetCPUAllocator() == &Wrapper(),
              "AllocationCounter: a CPU allocator of higher priority than ", int(kPriority),
              " is installed");
}

AllocationCounter::~AllocationCounter() {
  c10::SetCPUAllocator(previous_, kPriority);
  installed = false;
}

int64_t AllocationCounter::live_bytes() const { return live.load(); }
int64_t AllocationCounter::peak_bytes() const { return peak.load(); }
void AllocationCounter::ResetPeak() { peak = live.load(); }

}  // namespace zerotrain::recompute
