// The AVX2+F16C path of the INT8 block kernels: int8_blocks_body.h over 8-lane __m256. Only what
// lies between the target pragmas is compiled for AVX2; the table getter after them is not.
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "comm/int8_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
// Every header the body uses is included above the pragma: an inline function of a header
// compiled for AVX2 could be the copy the linker keeps for every caller.

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "tools/simd_avx2.h"

namespace zerotrain::comm::internal {
namespace {

struct Avx2Vec {
  static constexpr int kWidth = 8;
  __m256 v;
  static Avx2Vec Load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static Avx2Vec LoadBf16(const uint16_t* p) { return {simd::LoadBf16x8(p)}; }
  static Avx2Vec LoadHalf(const uint16_t* p) { return {simd::LoadHalfx8(p)}; }
  static __m256i ZeroBits() { return _mm256_setzero_si256(); }
  static __m256i MaxAbsBits(__m256i acc, Avx2Vec x) {
    const __m256i bits = _mm256_and_si256(_mm256_castps_si256(x.v), _mm256_set1_epi32(0x7FFFFFFF));
    return _mm256_max_epu32(acc, bits);
  }
  static uint32_t ReduceMaxBits(__m256i acc) {
    __m128i x = _mm_max_epu32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0xB1));
    return static_cast<uint32_t>(_mm_cvtsi128_si32(x));
  }
  static void StoreQ(Avx2Vec x, float inv, int8_t* q) {
    __m256i i = _mm256_cvtps_epi32(_mm256_mul_ps(x.v, _mm256_set1_ps(inv)));  // nearest even
    i = _mm256_min_epi32(_mm256_max_epi32(i, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(i, i), _mm256_setzero_si256());
    const int32_t lo = _mm_cvtsi128_si32(_mm256_castsi256_si128(bytes));
    const int32_t hi = _mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1));
    std::memcpy(q, &lo, 4);
    std::memcpy(q + 4, &hi, 4);
  }
  static Avx2Vec LoadQ(const int8_t* q, float scale) {
    const __m256i i = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
    return {_mm256_mul_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(scale))};
  }
  void Store(float* p) const { _mm256_storeu_ps(p, v); }
  void StoreBf16(uint16_t* p) const { simd::StoreBf16x8(p, v); }
  void StoreHalf(uint16_t* p) const { simd::StoreHalfx8(p, v); }
};

}  // namespace
}  // namespace zerotrain::comm::internal

#include "comm/int8_blocks_body.h"

#pragma GCC pop_options

namespace zerotrain::comm::internal {
const Int8Kernels& Avx2Int8Kernels() {
  static const Int8Kernels kernels = MakeInt8Kernels<Avx2Vec>();
  return kernels;
}
}  // namespace zerotrain::comm::internal

#else  // not x86-64: ResolveSimdPath never selects this path.

namespace zerotrain::comm::internal {
const Int8Kernels& Avx2Int8Kernels() { return ScalarInt8Kernels(); }
}  // namespace zerotrain::comm::internal

#endif
