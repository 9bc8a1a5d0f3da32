// The advisor's decision framework on clear-cut cases, the explanation's shape, the report, and
// the advisor binary's flag parsing.
#include "trainer/advisor/advisor.h"

#include <algorithm>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "trainer/advisor/advisor_flags.h"

namespace zerotrain::advisor {
namespace {

AdvisorInput Cluster(int64_t params, int64_t layer, int64_t per_node, int64_t nodes,
                     double device_gib, double host_gib) {
  AdvisorInput in;
  in.total_params = params;
  in.largest_layer_params = layer;
  in.gpus_per_node = per_node;
  in.nodes = nodes;
  in.device_memory_gib = device_gib;
  in.host_memory_gib = host_gib;
  return in;
}

Recommendation MustRecommend(const AdvisorInput& in) {
  auto r = Recommend(in);
  EXPECT_TRUE(r.ok()) << r.status();
  const auto lines = std::count(r->explanation.begin(), r->explanation.end(), '\n');
  EXPECT_GE(lines, 2) << r->explanation;
  EXPECT_LE(lines, 3) << r->explanation;
  return r.ok() ? *r : Recommendation{};
}

TEST(AdvisorTest, TinyModelOnBigDeviceIsStage0) {
  // 125M params: 20 bytes each is 2.3 GiB of 80.
  const Recommendation r = MustRecommend(Cluster(125'000'000, 38'597'376, 8, 1, 80, 512));
  EXPECT_EQ(r.stage, 0);
  EXPECT_EQ(r.offload, Offload::kNone);
  EXPECT_TRUE(r.fits);
}

TEST(AdvisorTest, OptimizerStatesDoNotFitIsStage1) {
  // 1.3B: stage 0 needs 24.2 GiB > 18 usable of 24; stage 1 over 8 ranks needs 7.3 GiB.
  const Recommendation r = MustRecommend(Cluster(1'300'000'000, 102'957'056, 8, 1, 24, 512));
  EXPECT_EQ(r.stage, 1);
  EXPECT_EQ(r.offload, Offload::kNone);
  EXPECT_NE(r.explanation.find("ZeRO stage 0 needs"), std::string::npos) << r.explanation;
}

TEST(AdvisorTest, LargerBatchesIsStage2) {
  AdvisorInput in = Cluster(1'300'000'000, 102'957'056, 8, 1, 80, 512);
  EXPECT_EQ(MustRecommend(in).stage, 0);
  in.prefer_larger_batches = true;
  const Recommendation r = MustRecommend(in);
  EXPECT_EQ(r.stage, 2);
  EXPECT_EQ(r.offload, Offload::kNone);
  EXPECT_NE(r.explanation.find("Larger batches"), std::string::npos) << r.explanation;
}

TEST(AdvisorTest, ThirteenBillionOnEightForty) {
  // Stage 2 needs 72.6 GiB per device; with CPU offload 24.2 GiB per device and 581 GiB per host.
  AdvisorInput in = Cluster(13'000'000'000, 262'144'000, 8, 1, 40, 1024);
  Recommendation r = MustRecommend(in);
  EXPECT_EQ(r.stage, 2);
  EXPECT_EQ(r.offload, Offload::kOptimizer);
  EXPECT_NE(r.explanation.find("ZeRO stage 2 needs"), std::string::npos) << r.explanation;
  // With too little host memory for that, stage 3 (28.2 GiB per device) is what fits.
  in.host_memory_gib = 256;
  r = MustRecommend(in);
  EXPECT_EQ(r.stage, 3);
  EXPECT_EQ(r.offload, Offload::kNone);
  EXPECT_NE(r.explanation.find("host memory"), std::string::npos) << r.explanation;
}

TEST(AdvisorTest, HostTooSmallForCpuOffloadIsNvme) {
  // 13B on one 40 GiB device: only full offload fits the device, and needs 327 GiB of host.
  const Recommendation r = MustRecommend(Cluster(13'000'000'000, 262'144'000, 1, 1, 40, 64));
  EXPECT_EQ(r.stage, 3);
  EXPECT_EQ(r.offload, Offload::kOptimizerAndParams);
  EXPECT_TRUE(r.nvme);
  EXPECT_TRUE(r.fits);
  EXPECT_NE(r.explanation.find("NVMe"), std::string::npos) << r.explanation;
}

TEST(AdvisorTest, LargestLayerTooBigFitsNothing) {
  const Recommendation r = MustRecommend(Cluster(13'000'000'000, 13'000'000'000, 1, 1, 16, 0));
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.explanation.find("Nothing fits"), std::string::npos) << r.explanation;
}

TEST(AdvisorTest, ReportHasEveryRowAndTheRecommendation) {
  const AdvisorInput in = Cluster(1'300'000'000, 102'957'056, 8, 1, 24, 0);
  auto report = EstimateMemoryReport(in);
  ASSERT_TRUE(report.ok()) << report.status();
  auto rows = EstimateModelStates(in);
  ASSERT_TRUE(rows.ok());
  const std::vector<std::string> lines = absl::StrSplit(*report, '\n');
  int table_rows = 0;
  bool in_table = false;
  for (const std::string& line : lines) {
    if (line.rfind("stage  offload", 0) == 0) in_table = true;
    if (in_table && line.size() > 2 && line[0] >= '0' && line[0] <= '3' && line[1] == ' ') {
      ++table_rows;
    }
  }
  EXPECT_EQ(table_rows, static_cast<int>(rows->size())) << *report;
  EXPECT_NE(report->find("Recommendation: ZeRO stage 1."), std::string::npos) << *report;
  EXPECT_NE(report->find("host fit not checked"), std::string::npos) << *report;
  EXPECT_NE(report->find("1.30B params, largest layer 103.0M"), std::string::npos) << *report;
  EXPECT_EQ(report->find("bf16 master weights"), std::string::npos) << *report;
  EXPECT_FALSE(EstimateMemoryReport(Cluster(0, 1, 1, 1, 1, 1)).ok());
}

// The bf16 flags reach the estimate and the report says so; states without a master are refused.
TEST(AdvisorFlagsTest, Bf16MasterWeightsAndStates) {
  auto in =
      ParseAdvisorFlags({"--params=1.3B", "--largest_layer_params=100M", "--device_memory_gib=40",
                         "--bf16_master_weights", "--bf16_optimizer_states"});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(in->bf16_master_weights);
  EXPECT_TRUE(in->bf16_optimizer_states);
  absl::StatusOr<std::string> report = EstimateMemoryReport(*in);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->find("bf16 master weights and optimizer states: 8 bytes per parameter of "
                         "sharded state"),
            std::string::npos)
      << *report;
  auto bad =
      ParseAdvisorFlags({"--params=1.3B", "--largest_layer_params=100M", "--device_memory_gib=40",
                         "--bf16_master_weights=false", "--bf16_optimizer_states"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bf16_optimizer_states: true (needs bf16_master_weights)"),
            std::string::npos)
      << bad.status();
}

TEST(AdvisorFlagsTest, HpzPartitionSize) {
  auto in =
      ParseAdvisorFlags({"--params=1.3B", "--largest_layer_params=100M", "--gpus_per_node=8",
                         "--nodes=2", "--device_memory_gib=40", "--zero_hpz_partition_size=8"});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->zero_hpz_partition_size, 8);
  absl::StatusOr<std::string> report = EstimateMemoryReport(*in);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->find("ZeRO++ hpZ: a secondary copy of the parameters over 8 devices"),
            std::string::npos)
      << *report;
}

TEST(AdvisorFlagsTest, ParsesFlagsAndSuffixes) {
  auto in = ParseAdvisorFlags({"--params=1.3B", "--largest_layer_params", "100M",
                               "--gpus_per_node=8", "--nodes=2", "--device_memory_gib=40",
                               "--host_memory_gib=512", "--prefer_larger_batches"});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->total_params, 1'300'000'000);
  EXPECT_EQ(in->largest_layer_params, 100'000'000);
  EXPECT_EQ(in->gpus_per_node, 8);
  EXPECT_EQ(in->nodes, 2);
  EXPECT_EQ(in->device_memory_gib, 40);
  EXPECT_EQ(in->host_memory_gib, 512);
  EXPECT_TRUE(in->prefer_larger_batches);
  EXPECT_EQ(*ParseCount("x", "13e9"), 13'000'000'000);
  EXPECT_EQ(*ParseCount("x", "125m"), 125'000'000);
}

TEST(AdvisorFlagsTest, ErrorsNameTheFlag) {
  const auto error_of = [](std::vector<std::string> args) {
    return std::string(ParseAdvisorFlags(args).status().message());
  };
  const std::vector<std::string> ok = {"--params=1B", "--largest_layer_params=1M",
                                       "--device_memory_gib=8"};
  auto with = [&](std::string extra) {
    auto a = ok;
    a.push_back(extra);
    return error_of(a);
  };
  EXPECT_NE(with("--params=abc").find("--params: 'abc'"), std::string::npos);
  EXPECT_NE(with("--params=-3").find("--params: '-3'"), std::string::npos);
  EXPECT_NE(with("--gpus_per_node=0").find("gpus_per_node: 0"), std::string::npos);
  EXPECT_NE(with("--device_memory_gib=-3").find("device_memory_gib: -3"), std::string::npos);
  EXPECT_NE(with("--bogus=1").find("unknown flag --bogus"), std::string::npos);
  EXPECT_NE(error_of({"--params=1B", "--device_memory_gib=8"}).find("--largest_layer_params"),
            std::string::npos);
}

}  // namespace
}  // namespace zerotrain::advisor
