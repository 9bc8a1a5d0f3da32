// Chunking and the fork/join used by every optimizer kernel.
#include "optim/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace zerotrain::optim {

std::vector<Chunk> SplitIntoChunks(absl::Span<const int64_t> sizes, int64_t chunk_elements) {
  std::vector<Chunk> chunks;
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (int64_t begin = 0; begin < sizes[s]; begin += chunk_elements) {
      const int64_t end = std::min(sizes[s], begin + chunk_elements);
      chunks.push_back({static_cast<int32_t>(s), begin, end});
    }
  }
  return chunks;
}

void RunTasks(int threads, int64_t num_tasks, const std::function<void(int64_t)>& task) {
  if (num_tasks <= 0) return;
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(threads, num_tasks));
  std::atomic<int64_t> next{0};
  auto drain = [&] {
    for (int64_t i = next.fetch_add(1); i < num_tasks; i = next.fetch_add(1)) task(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(drain);
  drain();
  for (std::thread& t : pool) t.join();
}

}  // namespace zerotrain::optim
