// Large host blocks mapped from the kernel one by one, with freed ones kept for reuse at the same
// size. glibc serves a block from a heap once its mapping threshold has risen (after the first
// large free), and a heap keeps freed blocks that are not at its top: within a stage 3 step,
// gather and bucket buffers of many sizes then left RSS 400-500 MiB above the live set. Here what
// is mapped never exceeds the most that was ever live at once by more than a small fraction: a
// block that misses the cache unmaps the oldest cached ones first where it would. The same sizes,
// which each layer's gathers, gradients and activations repeat, are served without new page faults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>

namespace zerotrain::engine {

struct MappedBlockStats {
  int64_t cached = 0;      // freed blocks kept for reuse
  int64_t live = 0;        // taken and not given back
  int64_t high_water = 0;  // the most live at once
  int64_t mapped = 0;      // new mappings made since construction: what the cache did not serve
};

class MappedBlockCache {
 public:
  // `slack`: how far the mapped bytes (live and cached) may stand above the most ever live at
  // once, as a fraction of it. Without any, a block of a new size would unmap most of the cache.
  explicit MappedBlockCache(double slack) : slack_(slack) {}
  ~MappedBlockCache() { Release(); }
  MappedBlockCache(const MappedBlockCache&) = delete;
  MappedBlockCache& operator=(const MappedBlockCache&) = delete;

  // A page-aligned block of at least `bytes`: a cached one of the same rounded size (its old
  // contents left in it), or a new mapping (zeroed), after unmapping the oldest cached blocks as
  // the bound above needs. Null when the system refuses the mapping.
  void* Take(size_t bytes);
  // Hands back a block Take returned, with the size asked for then.
  void Give(void* data, size_t bytes);
  // Unmaps every cached block: what a caller does where its live set is at its low and what comes
  // next allocates other sizes (the engine after a save, the trainer after an eval), so that RSS
  // comes down to it.
  void Release();
  // Unmaps the blocks that were cached already at the previous call and have not been taken
  // since, and keeps the rest: what a loop frees and takes again each iteration (the engine calls
  // it at each optimizer step: activations, gathers, buckets) stays mapped, where unmapping it
  // cost every forward its page faults again; what one phase left behind goes by the second call.
  void ReleaseIdle();

  MappedBlockStats stats() const;

 private:
  struct Block {
    void* data;
    size_t bytes;   // rounded to pages
    uint64_t mark;  // ReleaseIdle calls before it was given back
  };
  static size_t Rounded(size_t bytes);
  // With mu_ held.
  Block PopOldest();
  void Lend(size_t size);

  const double slack_;
  mutable std::mutex mu_;
  std::list<Block> free_;  // oldest first
  uint64_t marks_ = 0;     // ReleaseIdle calls so far
  std::unordered_multimap<size_t, std::list<Block>::iterator> by_size_;
  MappedBlockStats stats_;
};

}  // namespace zerotrain::engine
