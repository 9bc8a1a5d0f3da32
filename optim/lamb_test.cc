// LAMB against an independent double-precision loop of DeepSpeed FusedLamb's maths on every SIMD
// path: whole tensors, eps inside the square root without bias correction, bf16 gradients with a
// bf16 copy, and a tensor cut into two shards whose norms are summed in between
// (as ZeRO does across ranks), plus the trust-ratio clamp and the option checks.
#include "optim/lamb.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "optim/lamb_reference.h"
#include "optim/optim_testing.h"
#include "optim/precision.h"

namespace zerotrain::optim {
namespace {

using testing::AllClose;
using testing::kTotal;
using testing::RandomNormal;
using testing::ReferenceLamb;

const std::vector<int64_t> kTensorSizes = {0, 13, 40003, 7, 1000};

struct OurLamb {
  explicit OurLamb(const std::vector<float>& init)
      : params(kTotal + 1),
        grads(kTotal + 1),
        m(kTotal + 1, 0.0f),
        v(kTotal + 1, 0.0f),
        out(kTotal + 1) {
    std::copy(init.begin(), init.end(), params.begin() + 1);
  }
  // Shards starting one float past the allocation; `cut` splits the 40003 tensor in two.
  std::vector<LambShard> Shards(const void* g, DType gtype, bool copy, bool cut) {
    std::vector<int64_t> sizes = kTensorSizes;
    if (cut) sizes = {0, 13, 20000, 20003, 7, 1000};
    std::vector<LambShard> shards;
    int64_t off = 0;
    for (int64_t size : sizes) {
      shards.push_back({size, params.data() + 1 + off,
                        static_cast<const char*>(g) + off * DTypeSize(gtype), gtype,
                        m.data() + 1 + off, v.data() + 1 + off,
                        copy ? out.data() + 1 + off : nullptr, DType::kBFloat16});
      off += size;
    }
    return shards;
  }
  const float* P() const { return params.data() + 1; }
  std::vector<float> params, grads, m, v;
  std::vector<uint16_t> out;
};

std::vector<float> ToFloat(const std::vector<double>& x) { return {x.begin(), x.end()}; }

class LambPathTest : public ::testing::TestWithParam<SimdPath> {};

TEST_P(LambPathTest, MatchesReferenceOver200Steps) {
  const std::vector<float> init = RandomNormal(kTotal, 31);
  OurLamb ours(init);
  ReferenceLamb ref(init, kTensorSizes);
  LambOptions o;
  o.weight_decay = 0.01, o.threads = 2, o.simd = GetParam(), o.grad_scale = 4.0;
  for (int64_t t = 1; t <= 200; ++t) {
    o.lr = 1e-3 / (1 + t % 4);  // the schedule moves lr; 1e-3 is LAMB's usual scale
    const std::vector<float> g = RandomNormal(kTotal, 500 + t, 4.0f);
    std::copy(g.begin(), g.end(), ours.grads.begin() + 1);
    ASSERT_TRUE(
        FusedLambStep(o, t, ours.Shards(ours.grads.data() + 1, DType::kFloat32, false, false))
            .ok());
    ref.Step(o, t, g);
  }
  EXPECT_TRUE(AllClose(ours.P(), ToFloat(ref.p).data(), kTotal));
  EXPECT_TRUE(AllClose(ours.m.data() + 1, ToFloat(ref.m).data(), kTotal));
  EXPECT_TRUE(AllClose(ours.v.data() + 1, ToFloat(ref.v).data(), kTotal));
}

// FusedLamb's other modes: eps under the square root, no bias correction.
TEST_P(LambPathTest, EpsInsideSqrtWithoutBiasCorrection) {
  const std::vector<float> init = RandomNormal(kTotal, 34);
  OurLamb ours(init);
  ReferenceLamb ref(init, kTensorSizes);
  LambOptions o;
  o.eps_inside_sqrt = true, o.bias_correction = false, o.eps = 1e-6, o.weight_decay = 0.01;
  o.simd = GetParam();
  for (int64_t t = 1; t <= 50; ++t) {
    const std::vector<float> g = RandomNormal(kTotal, 800 + t);
    ASSERT_TRUE(FusedLambStep(o, t, ours.Shards(g.data(), DType::kFloat32, false, false)).ok());
    ref.Step(o, t, g);
  }
  EXPECT_TRUE(AllClose(ours.P(), ToFloat(ref.p).data(), kTotal));
}

TEST_P(LambPathTest, Bf16GradientsAndCopy) {
  const std::vector<float> init = RandomNormal(kTotal, 32);
  OurLamb ours(init);
  ReferenceLamb ref(init, kTensorSizes);
  LambOptions o;
  o.simd = GetParam();
  for (int64_t t = 1; t <= 50; ++t) {
    std::vector<float> g = RandomNormal(kTotal, 600 + t);
    std::vector<uint16_t> low(kTotal);
    ConvertFromFloat(g.data(), low.data(), DType::kBFloat16, kTotal);
    ConvertToFloat(low.data(), DType::kBFloat16, g.data(), kTotal);
    ASSERT_TRUE(FusedLambStep(o, t, ours.Shards(low.data(), DType::kBFloat16, true, false)).ok());
    ref.Step(o, t, g);
  }
  EXPECT_TRUE(AllClose(ours.P(), ToFloat(ref.p).data(), kTotal));
  for (int64_t i = 0; i < kTotal; ++i) {
    ASSERT_EQ(ours.out[i + 1], FloatToBFloat16(ours.P()[i])) << "bf16 copy of element " << i;
  }
}

// Two shards of one tensor: their norms are added before the trust ratio, as a ZeRO caller adds
// them across ranks.
TEST_P(LambPathTest, TensorCutIntoShardsMatchesWholeTensor) {
  const std::vector<float> init = RandomNormal(kTotal, 33);
  OurLamb whole(init), cut(init);
  LambOptions o;
  o.weight_decay = 0.1, o.simd = GetParam();
  for (int64_t t = 1; t <= 20; ++t) {
    const std::vector<float> g = RandomNormal(kTotal, 700 + t);
    ASSERT_TRUE(FusedLambStep(o, t, whole.Shards(g.data(), DType::kFloat32, false, false)).ok());
    const std::vector<LambShard> shards = cut.Shards(g.data(), DType::kFloat32, false, true);
    absl::StatusOr<std::vector<LambNorms>> norms = LambUpdateMoments(o, t, shards);
    ASSERT_TRUE(norms.ok());
    ASSERT_EQ(norms->size(), 6u);
    std::vector<double> trust;
    for (size_t i = 0; i < shards.size(); ++i) {
      LambNorms tensor = (*norms)[i];
      if (i == 2 || i == 3) {  // shards 2 and 3 are one tensor
        tensor.param_sq = (*norms)[2].param_sq + (*norms)[3].param_sq;
        tensor.update_sq = (*norms)[2].update_sq + (*norms)[3].update_sq;
      }
      trust.push_back(LambTrustRatio(o, tensor));
    }
    ASSERT_TRUE(LambApplyUpdate(o, t, shards, trust).ok());
  }
  EXPECT_TRUE(AllClose(cut.P(), whole.P(), kTotal));
}

INSTANTIATE_TEST_SUITE_P(SupportedPaths, LambPathTest, ::testing::ValuesIn(SupportedSimdPaths()),
                         [](const ::testing::TestParamInfo<SimdPath>& info) {
                           return testing::PathLabel(info.param);
                         });

TEST(LambTest, TrustRatioClampAndOptionChecks) {
  LambOptions o;
  EXPECT_EQ(LambTrustRatio(o, {0.0, 4.0}), 1.0);
  EXPECT_EQ(LambTrustRatio(o, {4.0, 0.0}), 1.0);
  EXPECT_DOUBLE_EQ(LambTrustRatio(o, {16.0, 4.0}), 2.0);
  EXPECT_DOUBLE_EQ(LambTrustRatio(o, {1e6, 1.0}), 10.0);   // max_coeff
  EXPECT_DOUBLE_EQ(LambTrustRatio(o, {1e-8, 1.0}), 0.01);  // min_coeff
  float p = 1, g = 1, m = 0, v = 0;
  const LambShard shard{1, &p, &g, DType::kFloat32, &m, &v};
  o.eps = 0;
  EXPECT_NE(FusedLambStep(o, 1, {&shard, 1}).message().find("LambOptions.eps = 0"),
            std::string::npos);
  EXPECT_FALSE(LambApplyUpdate(LambOptions(), 1, {&shard, 1}, {}).ok());
}

}  // namespace
}  // namespace zerotrain::optim
