// PinnedHostPool: reuse of freed blocks, the byte accounting, the limit and its message,
// alignment, blocks that outlive their pool, the CUDA fallback, and many threads at once.
#include "offload/pinned_host_pool.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zerotrain::offload {
namespace {

using ::testing::HasSubstr;

PinnedHostPool MakePool(const PinnedHostPoolOptions& o) {
  absl::StatusOr<PinnedHostPool> p = PinnedHostPool::Create(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

TEST(PinnedHostPoolTest, FreedBlockIsReusedForTheSameSizeClass) {
  PinnedHostPool pool = MakePool({});
  void* first;
  {
    absl::StatusOr<HostBlock> b = pool.Allocate(10000);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->size(), 10000);
    EXPECT_EQ(b->capacity(), 12288);  // rounded up to the 4096-byte alignment
    first = b->data();
  }
  // 12000 rounds to the same class (12288): served from the cache, no new allocation.
  absl::StatusOr<HostBlock> again = pool.Allocate(12000);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data(), first);
  PoolStats s = pool.stats();
  EXPECT_EQ(s.system_allocations, 1);
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.bytes_held, 12288);
  // A different class is a new allocation.
  absl::StatusOr<HostBlock> other = pool.Allocate(12289);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->data(), first);
  EXPECT_EQ(pool.stats().system_allocations, 2);
}

TEST(PinnedHostPoolTest, AccountsHeldInUseAndPeak) {
  PinnedHostPool pool = MakePool({});
  absl::StatusOr<HostBlock> a = pool.Allocate(4096);
  absl::StatusOr<HostBlock> b = pool.Allocate(3 * 4096 + 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(pool.bytes_in_use(), 4096 + 4 * 4096);
  EXPECT_EQ(pool.bytes_held(), 5 * 4096);
  b->Reset();
  EXPECT_TRUE(b->empty());
  EXPECT_EQ(pool.bytes_in_use(), 4096);
  EXPECT_EQ(pool.bytes_held(), 5 * 4096);  // cached, not freed
  EXPECT_EQ(pool.peak_bytes_in_use(), 5 * 4096);
  pool.ReleaseCached();
  EXPECT_EQ(pool.bytes_held(), 4096);
  EXPECT_EQ(pool.stats().peak_bytes_held, 5 * 4096);
}

TEST(PinnedHostPoolTest, AllocationBeyondTheLimitNamesRequestHeldAndLimit) {
  PinnedHostPoolOptions o;
  o.limit_bytes = 65536;
  PinnedHostPool pool = MakePool(o);
  absl::StatusOr<HostBlock> a = pool.Allocate(40000);  // 40960 held
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<HostBlock> b = pool.Allocate(30000);  // 32768 more: over
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("cannot allocate 30000 bytes (32768 rounded up"));
  EXPECT_THAT(b.status().message(), HasSubstr("holds 40960 bytes (40960 in use)"));
  EXPECT_THAT(b.status().message(), HasSubstr("limit_bytes is 65536"));
  EXPECT_EQ(pool.bytes_held(), 40960);                    // the failure changed nothing
  absl::StatusOr<HostBlock> fits = pool.Allocate(24576);  // exactly up to the limit
  EXPECT_TRUE(fits.ok()) << fits.status();
}

TEST(PinnedHostPoolTest, CachedBlocksOfOtherSizesAreReleasedToStayUnderTheLimit) {
  PinnedHostPoolOptions o;
  o.limit_bytes = 65536;
  PinnedHostPool pool = MakePool(o);
  ASSERT_TRUE(pool.Allocate(40960).ok());  // freed at once: 40960 cached
  EXPECT_EQ(pool.bytes_held(), 40960);
  absl::StatusOr<HostBlock> b = pool.Allocate(32768);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(pool.bytes_held(), 32768);
}

TEST(PinnedHostPoolTest, CacheStaysWithinASixteenthAboveThePeakInUse) {
  PinnedHostPool pool = MakePool({});  // no limit
  {
    absl::StatusOr<HostBlock> a = pool.Allocate(65536), b = pool.Allocate(65536);
    ASSERT_TRUE(a.ok() && b.ok());
  }  // 128 KiB in use at the peak, then cached
  EXPECT_EQ(pool.bytes_held(), 131072);
  {
    // 128 + 32 KiB would stand 25% above the peak in use: the cached blocks go.
    absl::StatusOr<HostBlock> c = pool.Allocate(32768);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(pool.bytes_held(), 32768);
  }
  const int64_t allocations = pool.stats().system_allocations;
  ASSERT_TRUE(pool.Allocate(32768).ok());  // the cache still serves a size asked for again
  EXPECT_EQ(pool.stats().system_allocations, allocations);
}

// Pageable blocks, and page-locked ones where CUDA is present (cudaHostAlloc itself returned
// blocks aligned to less than a page on an H200 machine; tools/gpu_check.sh runs this there).
TEST(PinnedHostPoolTest, BlocksHonourTheAlignment) {
  for (bool cuda : {false, true}) {
    SCOPED_TRACE(cuda ? "use_cuda_host_alloc" : "pageable");
    PinnedHostPoolOptions o;
    o.alignment = 1 << 16;
    o.use_cuda_host_alloc = cuda;
    PinnedHostPool pool = MakePool(o);
    EXPECT_EQ(pool.pinned(), cuda && CudaHostAllocAvailability().available);
    std::vector<HostBlock> blocks;
    for (int64_t bytes : {1, 100, 1752, 65536, 65537, 300000}) {
      absl::StatusOr<HostBlock> b = pool.Allocate(bytes);
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % (1 << 16), 0u) << bytes;
      EXPECT_EQ(b->capacity() % (1 << 16), 0) << bytes;
      std::memset(b->data(), 0xab, static_cast<size_t>(b->capacity()));  // all of it is ours
      blocks.push_back(*std::move(b));
    }
  }
}

TEST(PinnedHostPoolTest, RejectsBadOptionsAndSizes) {
  PinnedHostPoolOptions o;
  o.alignment = 3000;
  absl::StatusOr<PinnedHostPool> bad = PinnedHostPool::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("got 3000"));
  o = {};
  o.limit_bytes = -1;
  EXPECT_FALSE(PinnedHostPool::Create(o).ok());
  PinnedHostPool pool = MakePool({});
  for (int64_t bytes : {0, -5}) {
    absl::StatusOr<HostBlock> b = pool.Allocate(bytes);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(PinnedHostPoolTest, MovesTransferOwnershipAndBlocksMayOutliveThePool) {
  HostBlock kept;
  {
    PinnedHostPool pool = MakePool({});
    absl::StatusOr<HostBlock> a = pool.Allocate(8192);
    absl::StatusOr<HostBlock> b = pool.Allocate(4096);
    ASSERT_TRUE(a.ok() && b.ok());
    void* pa = a->data();
    HostBlock moved(std::move(*a));
    EXPECT_TRUE(a->empty());
    EXPECT_EQ(moved.data(), pa);
    moved = std::move(*b);  // returns pa's block to the pool
    EXPECT_EQ(pool.bytes_in_use(), 4096);
    kept = std::move(moved);
  }
  std::memset(kept.data(), 1, 4096);  // the pool object is gone; its state is not
  kept.Reset();
}

TEST(PinnedHostPoolTest, CudaHostAllocFallsBackWhenUnavailable) {
  PinnedHostPoolOptions o;
  o.use_cuda_host_alloc = true;
  PinnedHostPool pool = MakePool(o);
  const CudaHostAllocSupport& cuda = CudaHostAllocAvailability();
  EXPECT_EQ(pool.pinned(), cuda.available);
  if (!cuda.available) {
    EXPECT_EQ(pool.fallback_reason(), cuda.reason);
  }
  absl::StatusOr<HostBlock> b = pool.Allocate(1 << 20);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->pinned(), cuda.available);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
  std::memset(b->data(), 7, 1 << 20);
}

TEST(PinnedHostPoolTest, ManyThreadsNeverShareABlockAndTheBooksBalance) {
  PinnedHostPoolOptions o;
  o.limit_bytes = 64 << 20;
  PinnedHostPool pool = MakePool(o);
  constexpr int kThreads = 4;
  std::vector<int> corrupt(kThreads, 0), refused(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 gen(t);
      std::vector<HostBlock> held;
      for (int i = 0; i < 2000; ++i) {
        if (held.size() >= 4 || (gen() % 3 == 0 && !held.empty())) {
          HostBlock& b = held[gen() % held.size()];
          const auto* p = b.as<unsigned char>();
          for (int64_t k = 0; k < b.size(); k += 512) corrupt[t] += p[k] != t + 1;
          std::swap(b, held.back());
          held.pop_back();
          continue;
        }
        absl::StatusOr<HostBlock> b = pool.Allocate(int64_t{4096} << (gen() % 8));
        if (!b.ok()) {
          ++refused[t];
          continue;
        }
        std::memset(b->data(), t + 1, static_cast<size_t>(b->size()));
        held.push_back(*std::move(b));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(corrupt[t], 0) << "thread " << t << " found another thread's bytes in its block";
    EXPECT_EQ(refused[t], 0);  // 4 threads x 4 blocks x at most 512 KiB stay under 64 MiB
  }
  PoolStats s = pool.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_LE(s.peak_bytes_held, 64 << 20);
  EXPECT_GT(s.reuses, s.system_allocations);
}

}  // namespace
}  // namespace zerotrain::offload
