// The quantized all-gather over Gloo and shared memory, 1-3 ranks: every rank ends with every
// rank's shard quantized and dequantized (the kernels' own round trip, computed here from the
// known inputs), in float and bfloat16, in place or not; the op log counts the INT8 bytes; the
// ATen form that devices use gives the kernels' bytes.
#include "comm/quantized_all_gather.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <tuple>

#include "absl/strings/str_cat.h"
#include "comm/int8_blocks.h"
#include "comm/int8_parts.h"
#include "comm/testing.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

// Rank r's shard of m elements: values of several magnitudes, so blocks get different scales.
at::Tensor ShardOfRank(int r, int64_t m, at::ScalarType dtype) {
  const at::Tensor i = at::arange(m, at::kFloat);
  const at::Tensor magnitude = i.div(997).floor().mul(3).add(1).mul(r + 1);
  return at::sin(i.mul(0.37).add(r)).mul(magnitude).to(dtype);
}

// What every rank must hold: each rank's shard through the scalar kernels, padding dropped.
at::Tensor Expected(int world, int64_t n, at::ScalarType dtype) {
  const int64_t m = ShardNumel(n, world);
  const int64_t block = Int8BlockSize(m);
  at::Tensor out = at::empty({world * m}, at::TensorOptions().dtype(dtype));
  for (int r = 0; r < world; ++r) {
    at::Tensor x = ShardOfRank(r, m, dtype);
    std::vector<int8_t> q(m);
    std::vector<float> scales(Int8BlockCount(m, block));
    EXPECT_TRUE(
        QuantizeInt8(x.data_ptr(), dtype, m, block, q.data(), scales.data(), SimdPath::kScalar)
            .ok());
    EXPECT_TRUE(DequantizeInt8(q.data(), scales.data(), m, block,
                               out.narrow(0, r * m, m).data_ptr(), dtype, SimdPath::kScalar)
                    .ok());
  }
  return out.narrow(0, 0, n);
}

class QuantizedAllGatherTest : public ::testing::TestWithParam<std::tuple<BackendKind, int>> {};

TEST_P(QuantizedAllGatherTest, EveryRankHoldsEveryShardsRoundTrip) {
  const int world = std::get<1>(GetParam());
  GroupOptions options;
  options.backend = std::get<0>(GetParam());
  options.log_ops = true;
  auto outcomes = SpawnRanks(world, [&](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(options));
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{24001}}) {
        const int64_t m = ShardNumel(n, world);
        const at::Tensor want = Expected(world, n, dtype);
        at::Tensor out = at::zeros({n}, at::TensorOptions().dtype(dtype));
        ZT_RETURN_IF_ERROR(QuantizedAllGather(*group, ShardOfRank(rank, m, dtype), out));
        if (!out.equal(want)) {
          return absl::InternalError(absl::StrCat(c10::toString(dtype), " n ", n, ": differs"));
        }
        // In place: the shard is this rank's part of a padded output.
        at::Tensor padded = at::zeros({world * m}, at::TensorOptions().dtype(dtype));
        padded.narrow(0, rank * m, m).copy_(ShardOfRank(rank, m, dtype));
        ZT_RETURN_IF_ERROR(QuantizedAllGather(*group, padded.narrow(0, rank * m, m), padded));
        if (!padded.narrow(0, 0, n).equal(want)) {
          return absl::InternalError(absl::StrCat(c10::toString(dtype), " n ", n, ": in place"));
        }
      }
    }
    // Every all-gather on the wire was bytes: 12 ops, each of world * QuantizedShardBytes(m).
    int64_t want_bytes = 0;
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{24001}}) {
      want_bytes += 4 * world * QuantizedShardBytes(ShardNumel(n, world));
    }
    const CommTotals t = group->log().Totals();
    if (t.calls != 12 || t.bytes != want_bytes || t.inter_node != 0) {
      return absl::InternalError(absl::StrCat("log: ", t.calls, " calls, ", t.bytes,
                                              " bytes (want ", want_bytes, "), ", t.inter_node,
                                              " inter-node"));
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Backends, QuantizedAllGatherTest,
                         ::testing::Combine(::testing::Values(BackendKind::kGloo,
                                                              BackendKind::kShm),
                                            ::testing::Values(1, 2, 3)));

TEST(QuantizedAllGatherAtenTest, TheDeviceFormGivesTheKernelsBytes) {
  for (int64_t m : {int64_t{5}, int64_t{16}, int64_t{8000}, int64_t{20011}}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      at::Tensor x = ShardOfRank(1, m, dtype);
      if (m > 100) x[50] = std::numeric_limits<float>::infinity();  // a NaN block
      if (m == 16) x.fill_(1e-37);                                  // a block of zeros
      if (m == 20011) x.narrow(0, 6672, 6672).zero_();              // its second block
      const int64_t block = Int8BlockSize(m), blocks = Int8BlockCount(m, block);
      at::Tensor part = at::zeros({QuantizedShardBytes(m)}, at::kByte);
      internal::QuantizePartWithAtenOps(x, part);
      std::vector<int8_t> q(m);
      std::vector<float> scales(blocks);
      ASSERT_TRUE(QuantizeInt8(x.data_ptr(), dtype, m, block, q.data(), scales.data()).ok());
      const at::Tensor got_scales = part.narrow(0, 0, 4 * blocks).view(at::kFloat);
      for (int64_t k = 0; k < blocks; ++k) {
        const float g = got_scales[k].item<float>();
        ASSERT_TRUE(g == scales[k] || (std::isnan(g) && std::isnan(scales[k]))) << m << " " << k;
      }
      ASSERT_EQ(std::memcmp(part.narrow(0, 4 * blocks, m).data_ptr(), q.data(), m), 0) << m;
      at::Tensor back = at::empty({m}, x.options());
      internal::DequantizePartWithAtenOps(part, m, back);
      at::Tensor want = at::empty({m}, x.options());
      ASSERT_TRUE(DequantizeInt8(q.data(), scales.data(), m, block, want.data_ptr(), dtype).ok());
      EXPECT_TRUE(back.equal(want) ||
                  (back.isnan().equal(want.isnan()) && back.nan_to_num().equal(want.nan_to_num())))
          << m << " " << c10::toString(dtype);
    }
  }
}

TEST(QuantizedAllGatherArgsTest, AWrongShardSizeIsRefusedByName) {
  auto outcomes = SpawnRanks(1, [](int) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv());
    const absl::Status s = QuantizedAllGather(*group, at::zeros({3}), at::zeros({4}));
    if (s.message().find("ShardNumel(4, 1) = 4") == std::string::npos) {
      return absl::InternalError(absl::StrCat("unexpected: ", s.ToString()));
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::comm
