// MappedBlockCache: a freed block is served again at its size without a new mapping; what is
// mapped (live and cached) never stands above the most ever live at once by more than the slack,
// the oldest cached blocks going first, over a random sequence checked against our own count; a
// release gives the pages back to the system, and a release of the idle ones keeps what each
// iteration of a loop takes again.
#include "engine/mapped_block_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "engine/tensor_memory.h"
#include "gtest/gtest.h"

namespace zerotrain::engine {
namespace {

constexpr size_t kMiB = 1 << 20;

TEST(MappedBlockCache, ServesAFreedBlockAgainAtItsSize) {
  MappedBlockCache cache(4.0);  // up to 5x the most ever live
  const int64_t page = sysconf(_SC_PAGESIZE);
  void* a = cache.Take(kMiB + 1);  // rounded up to whole pages
  ASSERT_NE(a, nullptr);
  std::memset(a, 7, kMiB + 1);
  EXPECT_EQ(cache.stats().mapped, static_cast<int64_t>(kMiB) + page);
  EXPECT_EQ(cache.stats().live, cache.stats().mapped);
  cache.Give(a, kMiB + 1);
  EXPECT_EQ(cache.stats().cached, cache.stats().mapped);
  EXPECT_EQ(cache.stats().live, 0);
  void* other = cache.Take(2 * kMiB);  // another size: a new mapping, within the slack
  EXPECT_NE(other, a);
  void* again = cache.Take(kMiB + 2);  // the same pages: the cached block
  EXPECT_EQ(again, a);
  EXPECT_EQ(static_cast<unsigned char*>(again)[kMiB], 7);  // contents kept, as at::empty allows
  EXPECT_EQ(cache.stats().cached, 0);
  EXPECT_EQ(cache.stats().mapped, static_cast<int64_t>(3 * kMiB) + page);
  EXPECT_EQ(cache.stats().high_water, static_cast<int64_t>(3 * kMiB) + page);
  cache.Give(again, kMiB + 2);
  cache.Give(other, 2 * kMiB);
}

TEST(MappedBlockCache, AMissUnmapsTheOldestCachedBlocksPastTheBound) {
  MappedBlockCache cache(0.25);
  void* a = cache.Take(2 * kMiB);
  void* b = cache.Take(2 * kMiB);  // 4 MiB live: the high water
  cache.Give(a, 2 * kMiB);
  cache.Give(b, 2 * kMiB);
  void* c = cache.Take(kMiB);  // 0 live + 4 cached + 1 = the high water + 1/4: all kept
  EXPECT_EQ(cache.stats().cached, static_cast<int64_t>(4 * kMiB));
  void* d = cache.Take(3 * kMiB);  // 1 + 4 + 3 > 4 x 1.25: `a` goes, then `b`
  EXPECT_EQ(cache.stats().cached, 0);
  EXPECT_EQ(cache.stats().high_water, static_cast<int64_t>(4 * kMiB));
  cache.Give(c, kMiB);
  cache.Give(d, 3 * kMiB);
  const int64_t mapped = cache.stats().mapped;
  EXPECT_EQ(cache.Take(kMiB), c);  // what is cached is the latest
  EXPECT_EQ(cache.stats().mapped, mapped);
  cache.Give(c, kMiB);
}

TEST(MappedBlockCache, NeverMapsMoreThanTheMostLiveAtOncePlusTheSlack) {
  constexpr double kSlack = 0.25;
  MappedBlockCache cache(kSlack);
  std::mt19937 rng(7);
  const size_t sizes[] = {kMiB / 2, kMiB, 3 * kMiB / 2, 4 * kMiB};
  std::vector<std::pair<void*, size_t>> held;
  int64_t live = 0, high_water = 0, taken = 0;
  for (int i = 0; i < 2000; ++i) {
    if (held.empty() || rng() % 2 == 0) {
      const size_t n = sizes[rng() % 4];
      void* p = cache.Take(n);
      ASSERT_NE(p, nullptr);
      static_cast<char*>(p)[n - 1] = 1;
      held.emplace_back(p, n);
      live += static_cast<int64_t>(n);
      high_water = std::max(high_water, live);
      taken += static_cast<int64_t>(n);
    } else {
      const size_t k = rng() % held.size();
      cache.Give(held[k].first, held[k].second);
      live -= static_cast<int64_t>(held[k].second);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_EQ(cache.stats().live, live);
    ASSERT_LE(cache.stats().live + cache.stats().cached, high_water * (1 + kSlack)) << "op " << i;
  }
  // The cache served most of it: far less was mapped than taken.
  EXPECT_LT(cache.stats().mapped, taken / 2) << "taken " << taken;
  for (const auto& [p, n] : held) cache.Give(p, n);
}

TEST(MappedBlockCache, ReleaseGivesThePagesBack) {
  constexpr size_t kBytes = 32 * kMiB;
  MappedBlockCache cache(1.0);
  void* block = cache.Take(kBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  const int64_t touched = ResidentHostBytes();
  cache.Give(block, kBytes);
  EXPECT_GT(ResidentHostBytes(), touched - static_cast<int64_t>(kBytes / 2))
      << "cached, still held";
  cache.Release();
  EXPECT_EQ(cache.stats().cached, 0);
  EXPECT_LT(ResidentHostBytes(), touched - static_cast<int64_t>(kBytes / 2));
}

TEST(MappedBlockCache, ReleaseIdleKeepsWhatEachIterationTakesAgain) {
  constexpr size_t kBytes = 4 * kMiB;
  MappedBlockCache cache(1.0);
  void* block = cache.Take(kBytes);
  ASSERT_NE(block, nullptr);
  cache.Give(block, kBytes);
  cache.ReleaseIdle();  // freed in this iteration: kept for the next
  EXPECT_EQ(cache.stats().cached, static_cast<int64_t>(kBytes));
  for (int iteration = 0; iteration < 3; ++iteration) {
    void* again = cache.Take(kBytes);
    EXPECT_EQ(again, block) << "iteration " << iteration;
    cache.Give(again, kBytes);
    cache.ReleaseIdle();
  }
  EXPECT_EQ(cache.stats().mapped, static_cast<int64_t>(kBytes)) << "mapped once, reused since";
  // An iteration that does not take it: the next call unmaps it.
  cache.ReleaseIdle();
  EXPECT_EQ(cache.stats().cached, 0);
  // Idle blocks go oldest first and only they: one given before the mark, one after it.
  void* old_block = cache.Take(kBytes);
  void* new_block = cache.Take(2 * kBytes);
  cache.Give(old_block, kBytes);
  cache.ReleaseIdle();
  cache.Give(new_block, 2 * kBytes);
  cache.ReleaseIdle();
  EXPECT_EQ(cache.stats().cached, static_cast<int64_t>(2 * kBytes));
  cache.Release();
}

}  // namespace
}  // namespace zerotrain::engine
