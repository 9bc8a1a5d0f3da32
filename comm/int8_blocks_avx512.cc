// The AVX-512 (F, BW, VL) path of the INT8 block kernels: int8_blocks_body.h over 16-lane __m512.
// Only what lies between the target pragmas is compiled for AVX-512.
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
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

#include "tools/simd_avx512.h"

namespace zerotrain::comm::internal {
namespace {

struct Avx512Vec {
  static constexpr int kWidth = 16;
  __m512 v;
  static Avx512Vec Load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Avx512Vec LoadBf16(const uint16_t* p) { return {simd::LoadBf16x16(p)}; }
  static Avx512Vec LoadHalf(const uint16_t* p) { return {simd::LoadHalfx16(p)}; }
  static __m512i ZeroBits() { return _mm512_setzero_si512(); }
  static __m512i MaxAbsBits(__m512i acc, Avx512Vec x) {
    const __m512i bits = _mm512_and_si512(_mm512_castps_si512(x.v), _mm512_set1_epi32(0x7FFFFFFF));
    return _mm512_max_epu32(acc, bits);
  }
  static uint32_t ReduceMaxBits(__m512i acc) { return _mm512_reduce_max_epu32(acc); }
  static void StoreQ(Avx512Vec x, float inv, int8_t* q) {
    __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(x.v, _mm512_set1_ps(inv)));  // nearest even
    i = _mm512_min_epi32(_mm512_max_epi32(i, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(i));
  }
  static Avx512Vec LoadQ(const int8_t* q, float scale) {
    const __m512i i = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    return {_mm512_mul_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(scale))};
  }
  void Store(float* p) const { _mm512_storeu_ps(p, v); }
  void StoreBf16(uint16_t* p) const { simd::StoreBf16x16(p, v); }
  void StoreHalf(uint16_t* p) const { simd::StoreHalfx16(p, v); }
};

}  // namespace
}  // namespace zerotrain::comm::internal

#include "comm/int8_blocks_body.h"

#pragma GCC pop_options

namespace zerotrain::comm::internal {
const Int8Kernels& Avx512Int8Kernels() {
  static const Int8Kernels kernels = MakeInt8Kernels<Avx512Vec>();
  return kernels;
}
}  // namespace zerotrain::comm::internal

#else  // not x86-64: ResolveSimdPath never selects this path.

namespace zerotrain::comm::internal {
const Int8Kernels& Avx512Int8Kernels() { return ScalarInt8Kernels(); }
}  // namespace zerotrain::comm::internal

#endif
