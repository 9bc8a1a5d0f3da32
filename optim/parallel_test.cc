// SplitIntoChunks covers every element exactly once; RunTasks runs every task exactly once on
// however many threads.
#include "optim/parallel.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::optim {
namespace {

TEST(ParallelTest, ChunksCoverEveryShardInOrder) {
  const std::vector<int64_t> sizes = {0, 5, kChunkElements, 2 * kChunkElements + 3};
  const std::vector<Chunk> chunks = SplitIntoChunks(sizes);
  ASSERT_EQ(chunks.size(), 1u + 1u + 3u);
  std::vector<int64_t> covered(sizes.size(), 0);
  for (const Chunk& c : chunks) {
    EXPECT_EQ(c.begin, covered[c.shard]) << "chunks of a shard are contiguous and ordered";
    EXPECT_LE(c.end - c.begin, kChunkElements);
    EXPECT_EQ(c.begin % kChunkElements, 0);
    covered[c.shard] = c.end;
  }
  EXPECT_EQ(covered, sizes);
}

TEST(ParallelTest, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 8}) {
    std::vector<std::atomic<int>> runs(1000);
    RunTasks(threads, 1000, [&](int64_t i) { runs[i].fetch_add(1); });
    for (auto& r : runs) ASSERT_EQ(r.load(), 1) << threads << " threads";
  }
  RunTasks(4, 0, [](int64_t) { FAIL() << "no task to run"; });
}

}  // namespace
}  // namespace zerotrain::optim
