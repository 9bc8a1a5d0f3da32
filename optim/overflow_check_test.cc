// HasInfOrNan (and LocalSumOfSquares' non-finite result) with injected inf and NaN, in every
// gradient precision, at every position class (vector body, tail, shard boundaries), on every
// SIMD path.
#include "optim/overflow_check.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "optim/clip_grad.h"
#include "optim/optim_testing.h"

namespace zerotrain::optim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

using testing::GradBuffers;

class OverflowPathTest : public ::testing::TestWithParam<SimdPath> {};

TEST_P(OverflowPathTest, FindsEveryInjectedInfAndNan) {
  GradReductionOptions options{2, GetParam()};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    GradBuffers b(dtype);
    absl::StatusOr<bool> clean = HasInfOrNan(b.Shards(), options);
    ASSERT_TRUE(clean.ok());
    EXPECT_FALSE(*clean) << DTypeName(dtype);
    for (int64_t at : {int64_t{0}, int64_t{15}, int64_t{16383}, int64_t{16384}, int64_t{50001},
                       int64_t{50002}, int64_t{50003}, int64_t{50011}}) {
      for (float bad : {kInf, -kInf, kNan}) {
        const float saved = b.f32[at];
        b.f32[at] = bad;
        b.Sync();
        absl::StatusOr<bool> found = HasInfOrNan(b.Shards(), options);
        ASSERT_TRUE(found.ok());
        EXPECT_TRUE(*found) << DTypeName(dtype) << " " << bad << " at " << at;
        absl::StatusOr<double> sum = LocalSumOfSquares(b.Shards(), options);
        ASSERT_TRUE(sum.ok());
        EXPECT_FALSE(std::isfinite(*sum)) << DTypeName(dtype) << " " << bad << " at " << at;
        b.f32[at] = saved;
      }
    }
    b.Sync();
  }
}

INSTANTIATE_TEST_SUITE_P(SupportedPaths, OverflowPathTest,
                         ::testing::ValuesIn(SupportedSimdPaths()),
                         [](const ::testing::TestParamInfo<SimdPath>& info) {
                           return testing::PathLabel(info.param);
                         });

TEST(OverflowCheckTest, EmptyAndInvalidShards) {
  absl::StatusOr<bool> none = HasInfOrNan({});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  const GradShard null_data[] = {{nullptr, 4, DType::kFloat32}};
  absl::Status s = HasInfOrNan(null_data).status();
  EXPECT_NE(s.message().find("GradShard[0].data is null"), std::string::npos) << s;
  absl::StatusOr<double> zero = LocalSumOfSquares({});
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, 0.0);
}

}  // namespace
}  // namespace zerotrain::optim
