// MappedBlockCache (mapped_block_cache.h): mmap and munmap, and freed blocks kept by rounded size
// in the order they were freed, so the oldest is the one unmapped when the cache is full.
#include "engine/mapped_block_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace zerotrain::engine {
namespace {

void Unmap(void* data, size_t bytes) { munmap(data, bytes); }

}  // namespace

size_t MappedBlockCache::Rounded(size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

void* MappedBlockCache::Take(size_t bytes) {
  const size_t size = Rounded(bytes);
  std::vector<Block> evicted;  // unmapped after the lock is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto hit = by_size_.find(size);
    if (hit != by_size_.end()) {
      void* data = hit->second->data;
      free_.erase(hit->second);
      by_size_.erase(hit);
      stats_.cached -= static_cast<int64_t>(size);
      Lend(size);
      return data;
    }
    // A miss maps anew: the oldest cached blocks go first while what would be mapped exceeds the
    // most ever live at once (this block's too) by more than the slack.
    const double high_water =
        static_cast<double>(std::max(stats_.high_water, stats_.live + int64_t(size)));
    const auto bound = static_cast<int64_t>(high_water * (1.0 + slack_));
    while (!free_.empty() && stats_.live + stats_.cached + static_cast<int64_t>(size) > bound) {
      evicted.push_back(PopOldest());
    }
    stats_.mapped += static_cast<int64_t>(size);
    Lend(size);
  }
  for (const Block& b : evicted) Unmap(b.data, b.bytes);
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data != MAP_FAILED) return data;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.live -= static_cast<int64_t>(size);
  return nullptr;
}

void MappedBlockCache::Lend(size_t size) {
  stats_.live += static_cast<int64_t>(size);
  stats_.high_water = std::max(stats_.high_water, stats_.live);
}

MappedBlockCache::Block MappedBlockCache::PopOldest() {
  const Block oldest = free_.front();
  auto range = by_size_.equal_range(oldest.bytes);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == free_.begin()) {
      by_size_.erase(it);
      break;
    }
  }
  free_.pop_front();
  stats_.cached -= static_cast<int64_t>(oldest.bytes);
  return oldest;
}

void MappedBlockCache::Give(void* data, size_t bytes) {
  const size_t size = Rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.live -= static_cast<int64_t>(size);
  free_.push_back({data, size, marks_});
  by_size_.emplace(size, std::prev(free_.end()));
  stats_.cached += static_cast<int64_t>(size);
}

void MappedBlockCache::Release() {
  std::list<Block> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(free_);
    by_size_.clear();
    stats_.cached = 0;
  }
  for (const Block& b : all) Unmap(b.data, b.bytes);
}

void MappedBlockCache::ReleaseIdle() {
  std::vector<Block> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Blocks are cached in the order they were given back, so the idle ones come first.
    while (!free_.empty() && free_.front().mark < marks_) idle.push_back(PopOldest());
    ++marks_;
  }
  for (const Block& b : idle) Unmap(b.data, b.bytes);
}

MappedBlockStats MappedBlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace zerotrain::engine
