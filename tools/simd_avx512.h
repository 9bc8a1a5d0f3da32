// The conversions between 16 fp32 lanes and bf16 / fp16 that the AVX-512 kernels of optim/ and
// comm/ share. Include it after <immintrin.h> and <cstdint>, between the file's
// `#pragma GCC target("avx512f,avx512bw,avx512vl,...")` and its pop: the functions have internal
// linkage, so each kernel file keeps its own copy, compiled for its instruction set.
#pragma once

namespace zerotrain::simd {
namespace {

inline __m512 LoadBf16x16(const uint16_t* p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

inline __m512 LoadHalfx16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Round to nearest even as optim/precision.h's FloatToBFloat16; NaN lanes become the quiet NaN
// 0x7FC0.
inline void StoreBf16x16(uint16_t* p, __m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_blend_epi32(nan, rounded, _mm512_set1_epi32(0x7FC0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
}

inline void StoreHalfx16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace
}  // namespace zerotrain::simd
