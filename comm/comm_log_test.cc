// CommLog's bandwidths follow nccl-tests' definitions (checked by hand-computed figures); a
// report covers the ops its options profile and no other.
#include "comm/comm_log.h"

#include <string>
#include <vector>

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

TEST(CommLog, SummaryFiltersAndEachOpSeesEveryRecord) {
  CommLog log;
  std::vector<std::string> lines;
  log.OnEachOp([&](const OpStats& op) { lines.push_back(OpLine(op)); });
  log.Record(CollectiveKind::kAllReduce, 4000, 2, 0.002);
  log.Record(CollectiveKind::kAllGather, 8000, 2, 0.001);
  log.Record(CollectiveKind::kAllReduce, 4000, 2, 0.004);
  ASSERT_EQ(lines.size(), 3u);
  // 4000 B in 2 ms: 0.002 GB/s, busbw the same over 2 ranks.
  EXPECT_EQ(lines[0], "all_reduce 4000 B 2.000 ms algbw 0.002 GB/s busbw 0.002 GB/s");
  EXPECT_EQ(lines[1], "all_gather 8000 B 1.000 ms algbw 0.008 GB/s busbw 0.004 GB/s");
  const std::string only = log.Summary({CollectiveKind::kAllGather});
  EXPECT_NE(only.find("all_gather"), std::string::npos) << only;
  EXPECT_EQ(only.find("all_reduce"), std::string::npos) << only;
  EXPECT_NE(log.Summary().find("all_reduce"), std::string::npos);
}

TEST(CommLog, ReportCoversTheProfiledOpsAlone) {
  CommLog log;
  log.Record(CollectiveKind::kAllReduce, 4000, 2, 0.002);
  log.Record(CollectiveKind::kBroadcast, 100, 2, 0.001);
  CommReportOptions every;
  const std::string all = Report(every, log);
  EXPECT_EQ(all.rfind("collectives of rank 0:\n", 0), 0u) << all;
  EXPECT_NE(all.find("broadcast"), std::string::npos) << all;
  CommReportOptions listed;
  listed.prof_all = false;
  listed.prof_ops = {"all_reduce", "all_gather"};
  EXPECT_EQ(ReportedOps(listed),
            (std::vector<CollectiveKind>{CollectiveKind::kAllReduce, CollectiveKind::kAllGather}));
  const std::string some = Report(listed, log);
  EXPECT_EQ(some.rfind("collectives of rank 0 (prof_ops):\n", 0), 0u) << some;
  EXPECT_NE(some.find("all_reduce"), std::string::npos) << some;
  EXPECT_EQ(some.find("broadcast"), std::string::npos) << some;
  listed.prof_ops.clear();
  EXPECT_EQ(Report(listed, log),
            "collectives of rank 0: none profiled (prof_all false, prof_ops empty)\n");
}

TEST(CommLog, BusFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllGather, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllReduce, 1), 0.0);
}

TEST(CommLog, ReceivedBytesSplitByNode) {
  using K = CollectiveKind;
  // 4 ranks on 2 nodes: {0, 1} and {2, 3}. An all-gather of 4000 B brings 1000 B from each peer.
  const std::vector<int> nodes = {0, 0, 1, 1};
  WireBytes w = ReceivedBytes(K::kAllGather, 4000, 4, 1, 0, nodes);
  EXPECT_EQ(w.received, 3000);
  EXPECT_EQ(w.inter_node, 2000);
  w = ReceivedBytes(K::kReduceScatter, 4000, 4, 2, 0, nodes);
  EXPECT_EQ(w.received, 3000);
  EXPECT_EQ(w.inter_node, 2000);
  w = ReceivedBytes(K::kAllReduce, 4000, 4, 3, 0, nodes);
  EXPECT_EQ(w.received, 6000);
  EXPECT_EQ(w.inter_node, 4000);
  w = ReceivedBytes(K::kBroadcast, 4000, 4, 3, 0, nodes);  // from rank 0, on the other node
  EXPECT_EQ(w.received, 4000);
  EXPECT_EQ(w.inter_node, 4000);
  w = ReceivedBytes(K::kBroadcast, 4000, 4, 1, 0, nodes);  // from its own node
  EXPECT_EQ(w.inter_node, 0);
  EXPECT_EQ(ReceivedBytes(K::kBroadcast, 4000, 4, 0, 0, nodes).received, 0);  // the root
  EXPECT_EQ(ReceivedBytes(K::kAllGather, 4000, 4, 1, 0, {}).inter_node, 0);   // one node
  EXPECT_EQ(ReceivedBytes(K::kBarrier, 0, 4, 1, 0, nodes).received, 0);

  CommLog log;
  log.Record(K::kAllGather, 4000, 4, 0.001, ReceivedBytes(K::kAllGather, 4000, 4, 1, 0, nodes));
  log.Record(K::kAllGather, 4000, 4, 0.001, ReceivedBytes(K::kAllGather, 4000, 4, 1, 0, nodes));
  log.Record(K::kBroadcast, 100, 4, 0.001, ReceivedBytes(K::kBroadcast, 100, 4, 1, 0, nodes));
  const CommTotals t = log.Totals();
  EXPECT_EQ(t.calls, 3);
  EXPECT_EQ(t.bytes, 8100);
  EXPECT_EQ(t.received, 6100);
  EXPECT_EQ(t.inter_node, 4000);
  EXPECT_NE(log.Summary().find("received in all: 6100 B, of which from other nodes: 4000 B"),
            std::string::npos)
      << log.Summary();
}

}  // namespace
}  // namespace zerotrain::comm
