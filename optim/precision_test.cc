// Our fp32 <-> bf16/fp16 conversions against c10::BFloat16 and c10::Half, bit for bit: every
// 16-bit pattern one way, ties, subnormals, overflow edges and random values the other way, on
// the scalar helpers and (through an SGD step with lr = 1) on every vector path.
#include "optim/precision.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "optim/sgd.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim {
namespace {

float C10ToFloat(uint16_t bits, DType dtype) {
  return dtype == DType::kBFloat16
             ? static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()))
             : static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

uint16_t C10FromFloat(float x, DType dtype) {
  return dtype == DType::kBFloat16 ? c10::BFloat16(x).x : c10::Half(x).x;
}

bool SameBitsOrBothNan(uint16_t ours, uint16_t theirs, DType dtype) {
  const float a = C10ToFloat(ours, dtype), b = C10ToFloat(theirs, dtype);
  return ours == theirs || (std::isnan(a) && std::isnan(b));
}

// Values where rounding is hardest: exact ties between neighbours, one ulp either side, the
// overflow threshold, subnormals, infinities and NaN.
std::vector<float> HardFloats(DType dtype) {
  std::vector<float> v = {0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          65536.0f,
                          1e-8f,
                          -3e-7f,
                          6.1e-5f,
                          3.4e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min()};
  for (uint32_t bits = 0; bits < 0x7C00u; bits += 7) {
    const float lo = C10ToFloat(static_cast<uint16_t>(bits), dtype);
    const float hi = C10ToFloat(static_cast<uint16_t>(bits + 1), dtype);
    const float tie = lo + (hi - lo) / 2;  // exact: fp32 has 13+ more mantissa bits
    for (float x : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1e30f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) v.push_back(BitsToFloat(rng()));
  return v;
}

TEST(PrecisionTest, EverySixteenBitPatternWidensLikeC10) {
  for (uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float b = BFloat16ToFloat(h), f = HalfToFloat(h);
    const float cb = C10ToFloat(h, DType::kBFloat16), cf = C10ToFloat(h, DType::kFloat16);
    ASSERT_TRUE(FloatBits(b) == FloatBits(cb) || (std::isnan(b) && std::isnan(cb))) << bits;
    ASSERT_TRUE(FloatBits(f) == FloatBits(cf) || (std::isnan(f) && std::isnan(cf))) << bits;
  }
}

TEST(PrecisionTest, NarrowingRoundsToNearestEvenLikeC10) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (float x : HardFloats(dtype)) {
      const uint16_t ours = dtype == DType::kBFloat16 ? FloatToBFloat16(x) : FloatToHalf(x);
      ASSERT_TRUE(SameBitsOrBothNan(ours, C10FromFloat(x, dtype), dtype))
          << DTypeName(dtype) << " of " << x << " (bits " << std::hex << FloatBits(x) << "): ours "
          << ours << " c10 " << C10FromFloat(x, dtype);
    }
  }
}

class PrecisionPathTest : public ::testing::TestWithParam<SimdPath> {};

// SGD with lr = 1 and zero params writes -grad: this reads every 16-bit gradient pattern through
// the path's widening loads and writes the path's narrowing stores over hard values.
TEST_P(PrecisionPathTest, VectorLoadsAndStoresMatchC10) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<uint16_t> grads(0x10000);
    for (uint32_t i = 0; i <= 0xFFFFu; ++i) grads[i] = static_cast<uint16_t>(i);
    std::vector<float> params(grads.size(), 0.0f);
    std::vector<uint16_t> out(grads.size());
    SgdOptions o;
    o.lr = 1.0, o.simd = GetParam();
    SgdShard shard{static_cast<int64_t>(grads.size()),
                   params.data(),
                   grads.data(),
                   dtype,
                   nullptr,
                   out.data(),
                   dtype};
    ASSERT_TRUE(FusedSgdStep(o, 1, shard).ok());
    for (uint32_t i = 0; i <= 0xFFFFu; ++i) {
      const float expected = -C10ToFloat(static_cast<uint16_t>(i), dtype);
      ASSERT_TRUE(params[i] == expected || (std::isnan(params[i]) && std::isnan(expected))) << i;
      ASSERT_TRUE(SameBitsOrBothNan(out[i], C10FromFloat(params[i], dtype), dtype)) << i;
    }
    // Narrowing of arbitrary fp32 values: fp32 "gradients" of the hard values, negated twice.
    std::vector<float> hard = HardFloats(dtype);
    std::vector<float> p(hard.size(), 0.0f), g(hard.size());
    for (size_t i = 0; i < hard.size(); ++i) g[i] = -hard[i];
    std::vector<uint16_t> narrow(hard.size());
    SgdShard fp32{static_cast<int64_t>(hard.size()),
                  p.data(),
                  g.data(),
                  DType::kFloat32,
                  nullptr,
                  narrow.data(),
                  dtype};
    ASSERT_TRUE(FusedSgdStep(o, 1, fp32).ok());
    for (size_t i = 0; i < hard.size(); ++i) {
      ASSERT_TRUE(SameBitsOrBothNan(narrow[i], C10FromFloat(p[i], dtype), dtype))
          << "value " << hard[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SupportedPaths, PrecisionPathTest,
                         ::testing::ValuesIn(SupportedSimdPaths()),
                         [](const ::testing::TestParamInfo<SimdPath>& info) {
                           return std::string(SimdPathName(info.param));
                         });

TEST(PrecisionTest, BulkConversionsRoundTrip) {
  const std::vector<float> x = {1.5f, -2.25f, 1e-3f, 7.0f};
  std::vector<uint16_t> low(x.size());
  std::vector<float> back(x.size());
  ConvertFromFloat(x.data(), low.data(), DType::kFloat16, 4);
  ConvertToFloat(low.data(), DType::kFloat16, back.data(), 4);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[1], -2.25f);
  EXPECT_NEAR(back[2], 1e-3f, 1e-6f);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2);
  EXPECT_STREQ(DTypeName(DType::kFloat16), "float16");
}

}  // namespace
}  // namespace zerotrain::optim
