// LocalSumOfSquares against a double-precision sum in every gradient precision, on every SIMD
// path and thread count, and the torch / DeepSpeed clip factors.
#include "optim/clip_grad.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "optim/optim_testing.h"

namespace zerotrain::optim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

using testing::GradBuffers;

class ClipGradPathTest : public ::testing::TestWithParam<SimdPath> {};

TEST_P(ClipGradPathTest, SumOfSquaresMatchesDoubleReference) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    GradBuffers b(dtype);
    std::vector<float> exact(b.f32.size());
    ConvertToFloat(dtype == DType::kFloat32 ? static_cast<const void*>(b.f32.data())
                                            : static_cast<const void*>(b.low.data()),
                   dtype, exact.data(), static_cast<int64_t>(exact.size()));
    double expected = 0.0;
    for (float x : exact) expected += static_cast<double>(x) * x;
    std::vector<double> results;
    for (int threads : {1, 2, 5}) {
      absl::StatusOr<double> sum = LocalSumOfSquares(b.Shards(), {threads, GetParam()});
      ASSERT_TRUE(sum.ok());
      EXPECT_NEAR(*sum, expected, 1e-6 * expected) << DTypeName(dtype);
      results.push_back(*sum);
    }
    EXPECT_EQ(results[0], results[1]);  // the thread count does not change the sum
    EXPECT_EQ(results[0], results[2]);
  }
}

INSTANTIATE_TEST_SUITE_P(SupportedPaths, ClipGradPathTest,
                         ::testing::ValuesIn(SupportedSimdPaths()),
                         [](const ::testing::TestParamInfo<SimdPath>& info) {
                           return testing::PathLabel(info.param);
                         });

TEST(ClipGradTest, CoefficientsFollowTorchAndDeepSpeed) {
  // torch: max_norm / (norm + 1e-6), capped at 1.
  EXPECT_DOUBLE_EQ(*ClipCoefficient(10.0, 1.0), 1.0 / (10.0 + 1e-6));
  EXPECT_DOUBLE_EQ(*ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_FALSE(ClipCoefficient(std::nan(""), 1.0).ok());
  EXPECT_FALSE(ClipCoefficient(1.0, 0.0).ok());
  // DeepSpeed: grads carrying a scale of 1024 whose true norm is 8, clipped to 2: divide by
  // 1024 * (8 + 1e-6) / 2.
  EXPECT_DOUBLE_EQ(*CombinedGradScale(1024.0, 8.0 * 1024.0, 2.0), 1024.0 * (8.0 + 1e-6) / 2.0);
  EXPECT_DOUBLE_EQ(*CombinedGradScale(1024.0, 1.0 * 1024.0, 2.0), 1024.0);  // under the limit
  EXPECT_DOUBLE_EQ(*CombinedGradScale(1024.0, 1e9, 0.0), 1024.0);           // no clipping
  absl::Status s = CombinedGradScale(1024.0, kInf, 1.0).status();
  EXPECT_NE(s.message().find("overflowed"), std::string::npos) << s;
  EXPECT_FALSE(CombinedGradScale(0.0, 1.0, 1.0).ok());
}

}  // namespace
}  // namespace zerotrain::optim
