// Shared by optim's tests: the element-wise tolerance of the issue, random buffers, and a name
// for each forced SIMD path so failures say which path broke.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "optim/precision.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim::testing {

// |ours - theirs| <= 1e-7 + 1e-5 * |theirs|, element-wise, for fp32 results.
inline constexpr double kAbsTol = 1e-7;
inline constexpr double kRelTol = 1e-5;

// The shard sizes the optimizer tests cut one buffer into: empty, tiny, several chunks with an
// odd tail, a sub-vector remainder, and a round one; kTotal is their sum.
inline const std::vector<int64_t> kShardSizes = {0, 13, 40003, 7, 1000};
inline constexpr int64_t kTotal = 41023;

// Fails (non-fatally, at most a few messages) on the first elements outside the tolerance.
::testing::AssertionResult AllClose(const float* ours, const float* theirs, int64_t n,
                                    double abs_tol = kAbsTol, double rel_tol = kRelTol);

std::vector<float> RandomNormal(int64_t n, uint32_t seed, float stddev = 1.0f);

// Random gradients held as fp32 (`f32`) and, for bf16/fp16, converted into `low` by Sync(), cut
// into three shards over one buffer: 0, 50003 (several 16K chunks, an odd tail) and 9 elements.
struct GradBuffers {
  explicit GradBuffers(DType dtype);
  void Sync();  // after editing f32 (e.g. injecting inf), refresh the low-precision copy
  std::vector<GradShard> Shards() const;

  DType dtype;
  std::vector<float> f32;
  std::vector<uint16_t> low;
};

// "scalar", "avx2", "avx512": for SCOPED_TRACE and parameterized test names.
std::string PathLabel(SimdPath path);

}  // namespace zerotrain::optim::testing
