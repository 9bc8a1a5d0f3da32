// INT8 block quantization against a scalar reference written here: per block the scale is
// max|x| / 127, every value comes back within half a scale, values on the scale's grid come back
// exactly, non-finite blocks come back NaN without touching their neighbours, and every
// instruction set this machine has gives the same bits.
#include "comm/int8_blocks.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/randn.h>
#include <c10/util/BFloat16.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::comm {
namespace {

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scales;
};

Quantized Quantize(const std::vector<float>& x, int64_t block, SimdPath path) {
  const int64_t n = static_cast<int64_t>(x.size());
  Quantized out{std::vector<int8_t>(n), std::vector<float>(Int8BlockCount(n, block))};
  EXPECT_TRUE(
      QuantizeInt8(x.data(), at::kFloat, n, block, out.q.data(), out.scales.data(), path).ok());
  return out;
}

std::vector<float> Dequantize(const Quantized& qz, int64_t block, SimdPath path) {
  std::vector<float> out(qz.q.size());
  EXPECT_TRUE(DequantizeInt8(qz.q.data(), qz.scales.data(), static_cast<int64_t>(out.size()), block,
                             out.data(), at::kFloat, path)
                  .ok());
  return out;
}

std::vector<float> Random(int64_t n, int seed) {
  std::vector<float> x(n);
  uint32_t s = 2463534242u + seed;
  for (float& v : x) {  // xorshift: no dependence on LibTorch's generator
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    v = (static_cast<float>(s % 200001) - 100000.0f) * 1e-5f * (1 + seed % 7);
  }
  return x;
}

TEST(Int8BlocksTest, BlockSizeIsAtMost8000AndMatchesDeepSpeedWhereItsFirstTrySucceeds) {
  for (int64_t n : {1, 7, 8, 100, 7999, 8000, 8001, 16000, 24576, 1000003, 50000000}) {
    const int64_t b = Int8BlockSize(n);
    EXPECT_LE(b, kInt8MaxBlock) << n;
    EXPECT_EQ(b % 8, 0) << n;
    EXPECT_EQ(Int8BlockCount(n, b), (n + kInt8MaxBlock - 1) / kInt8MaxBlock) << n;
    const int64_t groups = (n + 7999) / 8000;  // DeepSpeed's CUDAQuantizer, first try
    if (n % (8 * groups) == 0) {
      EXPECT_EQ(b, n / groups) << n;
    }
  }
}

TEST(Int8BlocksTest, EveryValueWithinHalfAScaleOfTheReference) {
  for (int64_t n : {1, 15, 16, 17, 1000, 8000, 12347}) {
    for (int64_t block : {int64_t{8}, int64_t{24}, Int8BlockSize(n)}) {
      const std::vector<float> x = Random(n, static_cast<int>(n + block));
      const Quantized qz = Quantize(x, block, SimdPath::kScalar);
      const std::vector<float> back = Dequantize(qz, block, SimdPath::kScalar);
      for (int64_t k = 0; k < Int8BlockCount(n, block); ++k) {
        float absmax = 0;
        for (int64_t i = k * block; i < std::min(n, (k + 1) * block); ++i) {
          absmax = std::max(absmax, std::fabs(x[i]));
        }
        ASSERT_EQ(qz.scales[k], absmax / 127.0f) << "n " << n << " block " << k;
        for (int64_t i = k * block; i < std::min(n, (k + 1) * block); ++i) {
          ASSERT_LE(std::abs(qz.q[i]), 127);
          // Half a scale, plus the rounding of x * inv and of q * scale.
          ASSERT_LE(std::fabs(back[i] - x[i]), absmax / 127.0f * 0.5f * (1 + 1e-5f) + 1e-30f)
              << "n " << n << " element " << i;
        }
      }
    }
  }
}

TEST(Int8BlocksTest, ValuesOnTheGridComeBackExactly) {
  const float scale = 1.0f / 64;  // a power of two: every k * scale is exact
  std::vector<float> x;
  for (int k = -127; k <= 127; ++k) x.push_back(k * scale);
  // Blocks of 40 whose largest magnitude is 127 steps: each block's scale is the grid's.
  std::vector<float> blocks;
  for (int b = 0; b < 4; ++b) {
    for (int i = 0; i < 40; ++i) blocks.push_back(((i * 37 + b * 11) % 255 - 127) * scale);
    blocks[b * 40 + 39] = (b % 2 ? 127 : -127) * scale;
  }
  for (SimdPath path : SupportedSimdPaths()) {
    EXPECT_EQ(Dequantize(Quantize(blocks, 40, path), 40, path), blocks) << SimdPathName(path);
    // One block holding the whole grid: all of it exact.
    const std::vector<float> whole = Dequantize(Quantize(x, 256, path), 256, path);
    EXPECT_EQ(whole, x) << SimdPathName(path);
  }
}

TEST(Int8BlocksTest, NonFiniteBlocksBecomeNaNAndLeaveTheirNeighboursAlone) {
  std::vector<float> x = Random(64, 3);
  x[5] = std::numeric_limits<float>::infinity();
  x[20] = std::numeric_limits<float>::quiet_NaN();
  x[40] = -std::numeric_limits<float>::infinity();
  const std::vector<float> clean =
      Dequantize(Quantize(Random(64, 3), 16, SimdPath::kScalar), 16, SimdPath::kScalar);
  for (SimdPath path : SupportedSimdPaths()) {
    const std::vector<float> back = Dequantize(Quantize(x, 16, path), 16, path);
    for (int i = 0; i < 64; ++i) {
      if (i >= 48) {
        EXPECT_EQ(back[i], clean[i]) << SimdPathName(path) << " element " << i;
      } else {
        EXPECT_TRUE(std::isnan(back[i])) << SimdPathName(path) << " element " << i;
      }
    }
  }
}

// Zero blocks, and blocks too small for 127 / max to be finite (down to subnormals), come back
// as zeros on every path; the blocks beside them are untouched.
TEST(Int8BlocksTest, ZeroAndTinyBlocksComeBackAsZerosOnEveryPath) {
  std::vector<float> x = Random(96, 5);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;
  for (int i = 32; i < 64; ++i) x[i] = (i % 2 ? 1 : -1) * (i % 3 ? 3e-37f : 1e-44f);
  const std::vector<float> want_rest =
      Dequantize(Quantize(std::vector<float>(x.begin() + 64, x.end()), 32, SimdPath::kScalar), 32,
                 SimdPath::kScalar);
  for (SimdPath path : SupportedSimdPaths()) {
    const Quantized qz = Quantize(x, 32, path);
    const std::vector<float> back = Dequantize(qz, 32, path);
    EXPECT_EQ(qz.scales[0], 0.0f) << SimdPathName(path);
    EXPECT_EQ(qz.scales[1], 0.0f) << SimdPathName(path);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(back[i], 0.0f) << SimdPathName(path) << " " << i;
    EXPECT_EQ(std::vector<float>(back.begin() + 64, back.end()), want_rest) << SimdPathName(path);
  }
}

TEST(Int8BlocksTest, EveryInstructionSetGivesTheSameBits) {
  for (int64_t n : {3, 31, 8000, 20011}) {
    const std::vector<float> x = Random(n, 11);
    const int64_t block = Int8BlockSize(n);
    const Quantized want = Quantize(x, block, SimdPath::kScalar);
    const std::vector<float> want_back = Dequantize(want, block, SimdPath::kScalar);
    for (SimdPath path : SupportedSimdPaths()) {
      const Quantized got = Quantize(x, block, path);
      EXPECT_EQ(got.q, want.q) << SimdPathName(path) << " n " << n;
      EXPECT_EQ(got.scales, want.scales) << SimdPathName(path) << " n " << n;
      EXPECT_EQ(Dequantize(want, block, path), want_back) << SimdPathName(path) << " n " << n;
    }
  }
}

TEST(Int8BlocksTest, Bf16AndHalfInAndOutMatchTheFloatPathRounded) {
  const int64_t n = 1037, block = 64;
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    const at::Tensor x = at::randn({n}).to(dtype);
    const at::Tensor x32 = x.to(at::kFloat).contiguous();
    std::vector<float> xf(x32.data_ptr<float>(), x32.data_ptr<float>() + n);
    const Quantized want = Quantize(xf, block, SimdPath::kScalar);
    const at::Tensor want_back =
        at::from_blob(Dequantize(want, block, SimdPath::kScalar).data(), {n}).to(dtype);
    for (SimdPath path : SupportedSimdPaths()) {
      Quantized got{std::vector<int8_t>(n), std::vector<float>(Int8BlockCount(n, block))};
      ASSERT_TRUE(
          QuantizeInt8(x.data_ptr(), dtype, n, block, got.q.data(), got.scales.data(), path).ok());
      EXPECT_EQ(got.q, want.q) << SimdPathName(path);
      EXPECT_EQ(got.scales, want.scales) << SimdPathName(path);
      at::Tensor back = at::empty({n}, x.options());
      ASSERT_TRUE(
          DequantizeInt8(got.q.data(), got.scales.data(), n, block, back.data_ptr(), dtype, path)
              .ok());
      EXPECT_TRUE(back.equal(want_back)) << SimdPathName(path) << " " << c10::toString(dtype);
    }
  }
}

TEST(Int8BlocksTest, RefusesOtherDtypes) {
  int32_t x[4] = {};
  int8_t q[4];
  float s[1];
  const absl::Status st = QuantizeInt8(x, at::kInt, 4, 4, q, s);
  EXPECT_NE(st.message().find("dtype Int"), std::string::npos) << st;
}

}  // namespace
}  // namespace zerotrain::comm
