// The AVX-512 path: kernels_body.h over 16-lane __m512. Everything between the target pragmas is
// compiled for AVX-512; the table getter below them is not, so merely linking this file never
// puts an AVX-512 instruction on a path an older processor runs.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "optim/kernels.h"
#include "optim/precision.h"

#if defined(__x86_64__)
// GCC 12's avx512fintrin.h seeds masked intrinsics with _mm512_undefined_*(), which
// -Wmaybe-uninitialized (and, under ASan's -O1, -Wuninitialized) reports at every inlined use (GCC
// bug 105593); the values are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

namespace zerotrain::optim::internal {
namespace {

struct Avx512Vec {
  static constexpr int kWidth = 16;
  __m512 v;

  static Avx512Vec Set(float x) { return {_mm512_set1_ps(x)}; }
  static Avx512Vec Load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Avx512Vec LoadBf16(const uint16_t* p) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16))};
  }
  static Avx512Vec LoadHalf(const uint16_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  void Store(float* p) const { _mm512_storeu_ps(p, v); }
  // Round to nearest even as in FloatToBFloat16; NaN lanes become the quiet NaN 0x7FC0.
  void StoreBf16(uint16_t* p) const {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    rounded = _mm512_mask_blend_epi32(nan, rounded, _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
  }
  void StoreHalf(uint16_t* p) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static Avx512Vec Fma(Avx512Vec a, Avx512Vec b, Avx512Vec c) {
    return {_mm512_fmadd_ps(a.v, b.v, c.v)};
  }
  static Avx512Vec Sqrt(Avx512Vec a) { return {_mm512_sqrt_ps(a.v)}; }
  static Avx512Vec Max(Avx512Vec a, Avx512Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
  float ReduceAdd() const { return _mm512_reduce_add_ps(v); }
};

// Free functions, not friends: GCC does not apply the target pragma to friends defined in
// the class body.
inline Avx512Vec operator+(Avx512Vec a, Avx512Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Avx512Vec operator-(Avx512Vec a, Avx512Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline Avx512Vec operator*(Avx512Vec a, Avx512Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Avx512Vec operator/(Avx512Vec a, Avx512Vec b) { return {_mm512_div_ps(a.v, b.v)}; }

}  // namespace
}  // namespace zerotrain::optim::internal

#include "optim/kernels_body.h"

#pragma GCC pop_options

namespace zerotrain::optim::internal {

const KernelTable& Avx512KernelTable() {
  static const KernelTable table = MakeKernelTable<Avx512Vec>();
  return table;
}

}  // namespace zerotrain::optim::internal

#else  // not x86-64: ResolveSimdPath never selects this path.

namespace zerotrain::optim::internal {
const KernelTable& Avx512KernelTable() { return ScalarKernelTable(); }
}  // namespace zerotrain::optim::internal

#endif
