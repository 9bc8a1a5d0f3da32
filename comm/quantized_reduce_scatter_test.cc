// The two-level quantized reduce-scatter on 4 ranks split 2 x 2, 1 x 4 and 4 x 1 (nodes x ranks
// per node), in float and bfloat16: each rank's shard is the exact average (computed here from
// the known inputs) within the bound of two INT8 roundings, not equal to it (it was quantized),
// and the op log holds the two all-to-alls with the bytes the wire format gives.
#include "comm/quantized_reduce_scatter.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/zeros.h>

#include <tuple>

#include "absl/strings/str_cat.h"
#include "comm/int8_parts.h"
#include "comm/testing.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

constexpr int kWorld = 4;

// Rank r's gradient: magnitudes that vary along the buffer and between ranks.
at::Tensor Input(int r, int64_t n) {
  const at::Tensor i = at::arange(n, at::kFloat);
  return at::cos(i.mul(0.11).add(r * 0.7)).mul(i.div(500).floor().add(1)).mul(r + 1);
}

absl::StatusOr<std::string> Check(int rank, int per_node) {
  GroupOptions options;
  options.log_ops = true;
  ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(options));
  const int nodes = kWorld / per_node, node = rank / per_node, local = rank % per_node;
  std::vector<int> intra, inter;
  for (int l = 0; l < per_node; ++l) intra.push_back(node * per_node + l);
  for (int nd = 0; nd < nodes; ++nd) inter.push_back(nd * per_node + local);
  ZT_ASSIGN_OR_RETURN(auto intra_group, group->CreateSubgroup(intra));
  ZT_ASSIGN_OR_RETURN(auto inter_group, group->CreateSubgroup(inter));
  const TwoLevelGroups groups{intra_group.get(), inter_group.get()};
  const int64_t n = kWorld * 5003, m = n / kWorld;
  std::string report;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor sum = at::zeros({n});
    float max_abs = 0;
    for (int r = 0; r < kWorld; ++r) {
      const at::Tensor x = Input(r, n).to(dtype).to(at::kFloat);
      sum.add_(x);
      max_abs = std::max(max_abs, x.abs().max().item<float>());
    }
    const at::Tensor want = sum.narrow(0, rank * m, m).div(kWorld);
    at::Tensor out = at::zeros({m}, at::TensorOptions().dtype(dtype));
    ZT_RETURN_IF_ERROR(QuantizedReduceScatterAsync(groups, Input(rank, n).to(dtype), out).Wait());
    // Each chunk a node sums was rounded by at most half its block's scale (max / 127), and so
    // was each node's partial sum (at most k * max) that crosses nodes: summed over the world
    // and divided by it, at most max / 254 per quantizing stage; plus bf16's own rounding.
    const double bound = max_abs / 254.0 * ((per_node > 1) + 1.01 * (nodes > 1)) +
                         (dtype == at::kBFloat16 ? 0.008 * want.abs().max().item<double>() : 0);
    const at::Tensor diff = out.to(at::kFloat).sub(want).abs();
    const double err = diff.max().item<double>();
    // The typical error is far below the worst case: the mean within 1% of the mean magnitude.
    const double mean_ratio = diff.mean().item<double>() / want.abs().mean().item<double>();
    const std::string tag = absl::StrCat(nodes, " x ", per_node, " ", c10::toString(dtype));
    if (err > bound || err == 0 || mean_ratio > 0.01) {
      return absl::InternalError(absl::StrCat(tag, ": error ", err, ", bound ", bound,
                                              ", mean error / mean magnitude ", mean_ratio));
    }
    report += absl::StrCat(tag, ": max error ", err, " (bound ", bound, "), mean ratio ",
                           mean_ratio, "; ");
  }
  // Two all-to-alls per call: world parts within the node, `nodes` parts across.
  const int64_t part = Int8PartOf(m).bytes;
  int64_t within = 0, across = 0;
  for (const OpStats& s : group->log().Stats()) {
    if (s.kind != CollectiveKind::kAllToAll) continue;
    const bool node = s.world_size == per_node && per_node > 1 && s.bytes == kWorld * part;
    (node ? within : across) += s.count * s.bytes;
  }
  const int64_t want_within = per_node > 1 ? 2 * kWorld * part : 0;
  const int64_t want_across = nodes > 1 ? 2 * nodes * part : 0;
  if (within != want_within || across != want_across) {
    return absl::InternalError(absl::StrCat(nodes, " x ", per_node, ": all-to-all bytes ", within,
                                            " within and ", across, " across, want ", want_within,
                                            " and ", want_across));
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  return report;
}

class QuantizedReduceScatterTest : public ::testing::TestWithParam<int> {};

TEST_P(QuantizedReduceScatterTest, ShardsOfTheAverageWithinTwoRoundings) {
  const int per_node = GetParam();
  auto outcomes = SpawnRanks(kWorld, [per_node](int rank) { return Check(rank, per_node); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
  for (const auto& o : outcomes) std::printf("rank %d: %s\n", o.rank, o.payload.c_str());
}

INSTANTIATE_TEST_SUITE_P(Splits, QuantizedReduceScatterTest, ::testing::Values(2, 1, 4));

}  // namespace
}  // namespace zerotrain::comm
