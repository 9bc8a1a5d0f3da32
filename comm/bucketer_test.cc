// GradientBucketer gives the same results as one plain all-reduce per tensor: in all-reduce mode
// the tensors themselves, in reduce-scatter mode each rank's shard of every bucket. Buckets are
// smaller than the largest tensor, dtypes are mixed, and counts do not divide the world size.
#include "comm/bucketer.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "comm/testing.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

// The gradients rank `rank` produces, in backward order: sizes straddle the 4 KiB bucket.
std::vector<at::Tensor> Grads(int rank) {
  const std::vector<std::pair<int64_t, at::ScalarType>> specs = {
      {300, at::kFloat}, {7, at::kFloat}, {2500, at::kFloat}, {1, at::kBFloat16},
      {513, at::kFloat}, {999, at::kBFloat16}, {0, at::kFloat}, {1024, at::kFloat}};
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto [n, dtype] = specs[k];
    at::Tensor t = at::arange(n, at::kFloat).remainder(11).add(rank + k).to(dtype);
    out.push_back(k == 2 ? t.view({50, 50}) : t);
  }
  return out;
}

absl::StatusOr<std::string> RunBucketer(BucketOptions::Mode mode) {
  ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv());
  std::vector<at::Tensor> reference = Grads(group->rank());
  for (at::Tensor& t : reference) ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));

  BucketOptions options;
  options.bucket_bytes = 4096;
  options.mode = mode;
  options.op = ReduceOp::kSum;
  GradientBucketer bucketer(group.get(), options);
  std::vector<at::Tensor> grads = Grads(group->rank());
  for (const at::Tensor& g : grads) ZT_RETURN_IF_ERROR(bucketer.Add(g));
  ZT_RETURN_IF_ERROR(bucketer.Finish());
  if (bucketer.buckets().size() < 4) return absl::InternalError("expected several buckets");

  for (const ReducedBucket& b : bucketer.buckets()) {
    // This rank's shard covers [rank * s, (rank + 1) * s) of the padded bucket, clipped to numel.
    const int64_t s = PaddedNumel(b.numel, group->world_size()) / group->world_size();
    const int64_t covered = std::max<int64_t>(0, std::min(s, b.numel - group->rank() * s));
    if (mode == BucketOptions::Mode::kReduceScatter && b.range.size() != covered) {
      return absl::InternalError(absl::StrCat("bucket of ", b.numel, " covers ", b.range.size(),
                                              " elements on this rank, expected ", covered));
    }
    for (const BucketEntry& e : b.entries) {
      at::Tensor want = reference[e.tensor_index].reshape({-1});
      if (mode == BucketOptions::Mode::kAllReduce) {
        if (!at::equal(grads[e.tensor_index], reference[e.tensor_index])) {
          return absl::InternalError(absl::StrCat("tensor ", e.tensor_index, " differs"));
        }
        continue;
      }
      // The part of this tensor that falls into this rank's shard of the bucket.
      const int64_t lo = std::max(e.offset, b.range.begin);
      const int64_t hi = std::min(e.offset + e.numel, b.range.end);
      if (lo >= hi) continue;
      const int64_t shard_begin = ShardOf(PaddedNumel(b.numel, group->world_size()),
                                          group->world_size(), group->rank()).begin;
      at::Tensor got = b.result.narrow(0, lo - shard_begin, hi - lo);
      if (!at::equal(got, want.narrow(0, lo - e.offset, hi - lo))) {
        return absl::InternalError(absl::StrCat("shard of tensor ", e.tensor_index, " differs"));
      }
    }
  }
  return std::string("ok");
}

class BucketerTest : public ::testing::TestWithParam<int> {};

TEST_P(BucketerTest, AllReduceModeEqualsPlainAllReduce) {
  auto outcomes = SpawnRanks(GetParam(), [](int) {
    return RunBucketer(BucketOptions::Mode::kAllReduce);
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST_P(BucketerTest, ReduceScatterModeKeepsThisRanksShardOfPlainAllReduce) {
  auto outcomes = SpawnRanks(GetParam(), [](int) {
    return RunBucketer(BucketOptions::Mode::kReduceScatter);
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Worlds, BucketerTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace zerotrain::comm
