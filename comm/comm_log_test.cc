// CommLog's bandwidths follow nccl-tests' definitions (checked by hand-computed figures).
#include "comm/comm_log.h"

#include "gtest/gtest.h"

namespace zerotrain::comm {
namespace {

TEST(CommLog, AlgorithmAndBusBandwidth) {
  CommLog log;
  // 1 GB all-reduce over 4 ranks in 0.5 s and 1.5 s: mean 1 s, algbw 1 GB/s, busbw 2*3/4 = 1.5.
  log.Record(CollectiveKind::kAllReduce, 1000000000, 4, 0.5);
  log.Record(CollectiveKind::kAllReduce, 1000000000, 4, 1.5);
  // 2 GB reduce-scatter over 4 ranks in 1 s: algbw 2, busbw 2 * 3/4 = 1.5.
  log.Record(CollectiveKind::kReduceScatter, 2000000000, 4, 1.0);
  auto stats = log.Stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].kind, CollectiveKind::kAllReduce);
  EXPECT_EQ(stats[0].count, 2);
  EXPECT_DOUBLE_EQ(stats[0].mean_seconds(), 1.0);
  EXPECT_DOUBLE_EQ(stats[0].min_seconds, 0.5);
  EXPECT_DOUBLE_EQ(stats[0].algbw_gbps(), 1.0);
  EXPECT_DOUBLE_EQ(stats[0].busbw_gbps(), 1.5);
  EXPECT_DOUBLE_EQ(stats[1].algbw_gbps(), 2.0);
  EXPECT_DOUBLE_EQ(stats[1].busbw_gbps(), 1.5);
  EXPECT_NE(log.Summary().find("reduce_scatter"), std::string::npos);
  log.Clear();
  EXPECT_TRUE(log.Stats().empty());
}

TEST(CommLog, BusFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllGather, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllReduce, 1), 0.0);
}

}  // namespace
}  // namespace zerotrain::comm
