// The estimator against (1) the formulas re-derived here in integer arithmetic, for 125M, 1.3B
// and 13B parameters on several cluster shapes, (2) DeepSpeed's published zero3 estimate for
// t5-small, and (3) bad input naming the field.
#include "trainer/advisor/memory_estimator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "gtest/gtest.h"

namespace zerotrain::advisor {
namespace {

struct Bytes {
  double device, host;
};

// Bytes per (stage, offload) written out from the accounting: P params, L largest layer,
// n = GPUs per node, N = total GPUs, k = nodes, b = buffer factor, zero_init on.
std::map<std::pair<int, Offload>, Bytes> Reference(int64_t P, int64_t L, int64_t n, int64_t k,
                                                   double b) {
  const int64_t N = n * k;
  std::map<std::pair<int, Offload>, Bytes> r;
  r[{0, Offload::kNone}] = {double(20 * P), 4.0 * P * n * b};
  r[{1, Offload::kNone}] = {double(4 * P + (16 * P) / N), 4.0 * P * n * b};
  r[{2, Offload::kNone}] = {double(4 * P + (16 * P) / N), 4.0 * P * n * b};
  r[{1, Offload::kOptimizer}] = {double(4 * P), double(P) * std::max<int64_t>(4 * N, 16) * b};
  r[{2, Offload::kOptimizer}] = {double(2 * P), double(P) * std::max<int64_t>(4 * N, 16) * b};
  r[{3, Offload::kNone}] = {double(4 * L + (18 * P) / N), 4.0 * L * n * b};
  r[{3, Offload::kOptimizer}] = {double(4 * L + (2 * P) / N), 16.0 * P / k * b};
  r[{3, Offload::kOptimizerAndParams}] = {double(4 * L), 18.0 * P / k * b};
  return r;
}

TEST(MemoryEstimatorTest, MatchesFormulasForSeveralSizes) {
  const std::pair<int64_t, int64_t> models[] = {
      {125'000'000, 38'597'376}, {1'300'000'000, 102'957'056}, {13'000'000'000, 262'144'000}};
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {8, 1}, {4, 2}, {8, 16}};
  for (const auto& [params, layer] : models) {
    for (const auto& [per_node, nodes] : shapes) {
      AdvisorInput in;
      in.total_params = params;
      in.largest_layer_params = layer;
      in.gpus_per_node = per_node;
      in.nodes = nodes;
      in.device_memory_gib = 80;
      auto rows = EstimateModelStates(in);
      ASSERT_TRUE(rows.ok()) << rows.status();
      const auto want = Reference(params, layer, per_node, nodes, 1.5);
      ASSERT_EQ(rows->size(), want.size());
      for (const StageEstimate& e : *rows) {
        const Bytes& w = want.at({e.stage, e.offload});
        const std::string what = "P=" + std::to_string(params) + " n=" + std::to_string(per_node) +
                                 " k=" + std::to_string(nodes) + " stage " +
                                 std::to_string(e.stage) + " " + OffloadName(e.offload);
        EXPECT_NEAR(e.device_bytes, w.device, 1.0) << what;
        EXPECT_NEAR(e.host_bytes, w.host, 1.0) << what;
      }
    }
  }
}

// DeepSpeed's documented output of estimate_zero3_model_states_mem_needs_all_live for t5-small
// (60,506,624 params; largest layer the 32128 x 512 embedding) on 1 node x 1 GPU, in GiB as it
// prints them: (offload, zero_init) -> (per CPU, per GPU).
// bf16 master weights and gradients (12 bytes per parameter sharded) and bf16 optimizer states
// too (8), written out for 1.3B parameters on 8 GPUs; stage 0 keeps 16.
TEST(MemoryEstimatorTest, Bf16MasterWeightsAndStatesShrinkTheShardedBytes) {
  AdvisorInput in;
  in.total_params = 1'300'000'000;
  in.largest_layer_params = 102'957'056;
  in.gpus_per_node = 8;
  in.device_memory_gib = 80;
  const int64_t P = in.total_params, L = in.largest_layer_params;
  for (const auto& [master, states, k] :
       {std::tuple{false, false, 16}, std::tuple{true, false, 12}, std::tuple{true, true, 8}}) {
    in.bf16_master_weights = master;
    in.bf16_optimizer_states = states;
    SCOPED_TRACE(k);
    EXPECT_EQ(ShardedStateBytes(in), k);
    EXPECT_EQ(EstimateOne(in, 0, Offload::kNone).device_bytes, 20 * P);
    EXPECT_EQ(EstimateOne(in, 2, Offload::kNone).device_bytes, 4 * P + k * P / 8);
    EXPECT_EQ(EstimateOne(in, 3, Offload::kNone).device_bytes,
              4 * L + (2 + k - (master ? 2 : 0)) * P / 8);
    EXPECT_EQ(EstimateOne(in, 3, Offload::kOptimizer).host_bytes,
              static_cast<int64_t>(double(P) * k * 1.5));
  }
  in.bf16_master_weights = false;
  EXPECT_EQ(ValidateAdvisorInput(in).message(),
            "bf16_optimizer_states: true (needs bf16_master_weights)");
}

// hpZ adds the 2-byte secondary copy over its group to stage 3 alone; a group that does not
// divide the devices is refused.
TEST(MemoryEstimatorTest, HpzSecondaryCopyAtStage3) {
  AdvisorInput in;
  in.total_params = 1'300'000'000;
  in.largest_layer_params = 102'957'056;
  in.gpus_per_node = 8;
  in.nodes = 2;
  in.device_memory_gib = 80;
  const StageEstimate plain3 = EstimateOne(in, 3, Offload::kNone);
  const StageEstimate plain2 = EstimateOne(in, 2, Offload::kNone);
  in.zero_hpz_partition_size = 8;
  EXPECT_EQ(EstimateOne(in, 3, Offload::kNone).device_bytes,
            plain3.device_bytes + 2 * in.total_params / 8);
  EXPECT_EQ(EstimateOne(in, 2, Offload::kNone).device_bytes, plain2.device_bytes);
  in.zero_hpz_partition_size = 3;
  EXPECT_EQ(ValidateAdvisorInput(in).message(),
            "zero_hpz_partition_size: 3 (must be 0 or 1 (off), or divide the devices "
            "(gpus_per_node x nodes))");
}

TEST(MemoryEstimatorTest, MatchesDeepSpeedPublishedZero3Numbers) {
  AdvisorInput in;
  in.total_params = 60'506'624;
  in.largest_layer_params = 32128 * 512;
  in.device_memory_gib = 16;
  struct Row {
    Offload offload;
    bool zero_init;
    double cpu_gib, gpu_gib;
  };
  const Row rows[] = {{Offload::kOptimizerAndParams, true, 1.52, 0.06},
                      {Offload::kOptimizerAndParams, false, 1.52, 0.06},
                      {Offload::kOptimizer, true, 1.35, 0.17},
                      {Offload::kOptimizer, false, 1.35, 0.17},
                      {Offload::kNone, true, 0.09, 1.08},
                      {Offload::kNone, false, 0.34, 1.08}};
  for (const Row& r : rows) {
    in.zero_init = r.zero_init;
    const StageEstimate e = EstimateOne(in, 3, r.offload);
    EXPECT_NEAR(e.host_bytes / kGiB, r.cpu_gib, 0.005) << OffloadName(r.offload) << r.zero_init;
    EXPECT_NEAR(e.device_bytes / kGiB, r.gpu_gib, 0.005) << OffloadName(r.offload) << r.zero_init;
  }
}

TEST(MemoryEstimatorTest, FitFlagsUseTheActivationShareAndHostMemory) {
  AdvisorInput in;
  in.total_params = 800'000'000;  // stage 0: 20 x 0.8e9 = 16e9 bytes = 14.9 GiB
  in.largest_layer_params = 50'000'000;
  in.device_memory_gib = 20;
  in.activation_fraction = 0.25;  // 15 GiB usable: fits
  in.host_memory_gib = 5;         // stage 0 host: 4.8e9 bytes = 4.47 GiB: fits
  auto rows = EstimateModelStates(in);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE((*rows)[0].fits());
  in.activation_fraction = 0.3;  // 14 GiB usable: no longer fits
  rows = EstimateModelStates(in);
  EXPECT_FALSE((*rows)[0].fits_device);
  in.host_memory_gib = 4;
  rows = EstimateModelStates(in);
  EXPECT_FALSE((*rows)[0].fits_host);
}

TEST(MemoryEstimatorTest, BadInputNamesTheField) {
  const auto error_of = [](auto mutate) {
    AdvisorInput in;
    in.total_params = 1000;
    in.largest_layer_params = 100;
    in.device_memory_gib = 1;
    mutate(in);
    return std::string(ValidateAdvisorInput(in).message());
  };
  EXPECT_EQ(error_of([](AdvisorInput&) {}), "");
  EXPECT_NE(error_of([](AdvisorInput& i) { i.total_params = 0; }).find("params: 0"),
            std::string::npos);
  EXPECT_NE(error_of([](AdvisorInput& i) { i.gpus_per_node = 0; }).find("gpus_per_node: 0"),
            std::string::npos);
  EXPECT_NE(error_of([](AdvisorInput& i) { i.nodes = -2; }).find("nodes: -2"), std::string::npos);
  EXPECT_NE(
      error_of([](AdvisorInput& i) { i.device_memory_gib = -1; }).find("device_memory_gib: -1"),
      std::string::npos);
  EXPECT_NE(error_of([](AdvisorInput& i) { i.host_memory_gib = -4; }).find("host_memory_gib: -4"),
            std::string::npos);
  EXPECT_NE(error_of([](AdvisorInput& i) {
              i.largest_layer_params = 2000;
            }).find("largest_layer_params: 2000"),
            std::string::npos);
  EXPECT_NE(
      error_of([](AdvisorInput& i) { i.activation_fraction = 1; }).find("activation_fraction"),
      std::string::npos);
  AdvisorInput zero;
  EXPECT_FALSE(EstimateModelStates(zero).ok());
}

}  // namespace
}  // namespace zerotrain::advisor
