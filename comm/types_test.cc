// Shard arithmetic: every element of [0, numel) is covered by exactly one rank's shard.
#include "comm/types.h"

#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::comm {
namespace {

TEST(ShardArithmetic, ShardsTileTheBufferExactlyOnce) {
  for (int world = 1; world <= 5; ++world) {
    for (int64_t numel : {0, 1, 7, 8, 1000, 1001}) {
      const int64_t shard = ShardNumel(numel, world);
      EXPECT_EQ(PaddedNumel(numel, world), shard * world);
      EXPECT_GE(shard * world, numel);
      EXPECT_LT(shard * world - numel, world);
      std::vector<int> covered(numel, 0);
      for (int r = 0; r < world; ++r) {
        ShardRange range = ShardOf(numel, world, r);
        EXPECT_LE(range.size(), shard);
        EXPECT_EQ(range.begin, std::min(numel, shard * r));
        for (int64_t i = range.begin; i < range.end; ++i) covered[i]++;
      }
      for (int64_t i = 0; i < numel; ++i) ASSERT_EQ(covered[i], 1) << numel << "/" << world;
    }
  }
}

TEST(Describe, NamesOpSequenceRankAndWorld) {
  OpDesc op;
  op.kind = CollectiveKind::kReduceScatter;
  op.seq = 17;
  op.rank = 1;
  op.world_size = 4;
  op.reduce = ReduceOp::kAvg;
  op.dtype = at::kBFloat16;
  op.numel = 1000;
  EXPECT_EQ(Describe(op), "reduce_scatter #17 (avg, 1000 x BFloat16) on rank 1 of 4");
  EXPECT_EQ(op.bytes(), 2000);
  op.kind = CollectiveKind::kBarrier;
  EXPECT_EQ(Describe(op), "barrier #17 on rank 1 of 4");
}

}  // namespace
}  // namespace zerotrain::comm
