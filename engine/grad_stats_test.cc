// HostGradStats against a float64 scalar loop, and its ATen form (what a GPU runs) against the
// host kernels on the same CPU tensors, for fp32, bf16 and fp16 shards with and without inf/NaN.
#include "engine/grad_stats.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <cmath>
#include <limits>

namespace zerotrain::engine {
namespace {

double ScalarSquares(const std::vector<at::Tensor>& grads) {
  double sum = 0;
  for (const at::Tensor& g : grads) {
    const at::Tensor f = g.to(at::kDouble).contiguous();
    const double* v = f.data_ptr<double>();
    for (int64_t i = 0; i < f.numel(); ++i) sum += v[i] * v[i];
  }
  return sum;
}

std::vector<at::Tensor> Shards(at::ScalarType dtype) {
  at::manual_seed(3);
  return {at::randn({1000}).to(dtype), at::randn({37}).mul(100).to(dtype),
          at::empty({0}, at::TensorOptions(dtype))};
}

TEST(GradStatsTest, SumOfSquaresMatchesAScalarLoopOnBothForms) {
  const GradStatsRequest both{true, true};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const std::vector<at::Tensor> grads = Shards(dtype);
    const double want = ScalarSquares(grads);
    const at::Tensor host = *HostGradStats(grads, both);
    const at::Tensor aten = AtenGradStats(grads, both);
    EXPECT_EQ(host[0].item<double>(), 0) << dtype;
    EXPECT_EQ(aten[0].item<double>(), 0) << dtype;
    EXPECT_NEAR(host[1].item<double>(), want, 1e-6 * want) << dtype;
    // Float accumulation inside each tensor.
    EXPECT_NEAR(aten[1].item<double>(), want, 1e-5 * want) << dtype;
  }
}

TEST(GradStatsTest, InfOrNanAnywhereIsAnOverflowOnBothForms) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    for (at::ScalarType dtype : {at::kFloat, at::kHalf}) {
      std::vector<at::Tensor> grads = Shards(dtype);
      grads[1][5] = bad;
      EXPECT_EQ((*HostGradStats(grads, {true, false}))[0].item<double>(), 1) << dtype;
      EXPECT_EQ(AtenGradStats(grads, {true, false})[0].item<double>(), 1) << dtype;
      // With the sum of squares asked for too, the host reads the flag off the sum (one pass).
      EXPECT_EQ((*HostGradStats(grads, {true, true}))[0].item<double>(), 1) << dtype;
      EXPECT_EQ(AtenGradStats(grads, {true, true})[0].item<double>(), 1) << dtype;
    }
  }
}

TEST(GradStatsTest, TheLargestFp16ValuesAreNoOverflow) {
  // 65504^2 * 4096 is far past fp16 and float16 sums, but finite in the float norm squared.
  std::vector<at::Tensor> grads = {at::full({4096}, 65504.0, at::kHalf)};
  EXPECT_EQ(AtenGradStats(grads, {true, true})[0].item<double>(), 0);
  EXPECT_EQ((*HostGradStats(grads, {true, true}))[0].item<double>(), 0);
  EXPECT_NEAR(AtenGradStats(grads, {true, true})[1].item<double>(), 65504.0 * 65504.0 * 4096,
              1e-5 * 65504.0 * 65504.0 * 4096);
}

TEST(GradStatsTest, UnrequestedEntriesAreZero) {
  std::vector<at::Tensor> grads = Shards(at::kFloat);
  grads[0][0] = std::numeric_limits<float>::infinity();
  const at::Tensor aten = AtenGradStats(grads, {false, false});
  EXPECT_EQ(aten[0].item<double>(), 0);
  EXPECT_EQ(aten[1].item<double>(), 0);
  const at::Tensor host = *HostGradStats(grads, {false, true});
  EXPECT_EQ(host[0].item<double>(), 0);
  EXPECT_TRUE(std::isinf(host[1].item<double>()));
}

}  // namespace
}  // namespace zerotrain::engine
