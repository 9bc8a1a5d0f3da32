// The conversions between 8 fp32 lanes and bf16 / fp16 that the AVX2 kernels of optim/ and comm/
// share. Include it after <immintrin.h> and <cstdint>, between the file's
// `#pragma GCC target("avx2,fma,f16c")` and its pop: the functions have internal linkage, so each
// kernel file keeps its own copy, compiled for its instruction set.
#pragma once

namespace zerotrain::simd {
namespace {

inline __m256 LoadBf16x8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

inline __m256 LoadHalfx8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Round to nearest even as optim/precision.h's FloatToBFloat16; NaN lanes become the quiet NaN
// 0x7FC0.
inline void StoreBf16x8(uint16_t* p, __m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
  // packus works per 128-bit lane; gather the two useful quadwords into the low half.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

inline void StoreHalfx8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace
}  // namespace zerotrain::simd
