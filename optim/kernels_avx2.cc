// The AVX2+FMA+F16C path: kernels_body.h over 8-lane __m256. Everything between the target
// pragmas is compiled for AVX2; the table getter below them is not, so merely linking this file
// never puts an AVX2 instruction on a path an older processor runs.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "optim/kernels.h"
#include "optim/precision.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "tools/simd_avx2.h"

namespace zerotrain::optim::internal {
namespace {

struct Avx2Vec {
  static constexpr int kWidth = 8;
  __m256 v;

  static Avx2Vec Set(float x) { return {_mm256_set1_ps(x)}; }
  static Avx2Vec Load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static Avx2Vec LoadBf16(const uint16_t* p) { return {simd::LoadBf16x8(p)}; }
  static Avx2Vec LoadHalf(const uint16_t* p) { return {simd::LoadHalfx8(p)}; }
  void Store(float* p) const { _mm256_storeu_ps(p, v); }
  void StoreBf16(uint16_t* p) const { simd::StoreBf16x8(p, v); }
  void StoreHalf(uint16_t* p) const { simd::StoreHalfx8(p, v); }
  static Avx2Vec Fma(Avx2Vec a, Avx2Vec b, Avx2Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static Avx2Vec Sqrt(Avx2Vec a) { return {_mm256_sqrt_ps(a.v)}; }
  static Avx2Vec Max(Avx2Vec a, Avx2Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
  float ReduceAdd() const {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
};

// Free functions, not friends: GCC does not apply the target pragma to friends defined in
// the class body.
inline Avx2Vec operator+(Avx2Vec a, Avx2Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Avx2Vec operator-(Avx2Vec a, Avx2Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline Avx2Vec operator*(Avx2Vec a, Avx2Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline Avx2Vec operator/(Avx2Vec a, Avx2Vec b) { return {_mm256_div_ps(a.v, b.v)}; }

}  // namespace
}  // namespace zerotrain::optim::internal

#include "optim/kernels_body.h"

#pragma GCC pop_options

namespace zerotrain::optim::internal {

const KernelTable& Avx2KernelTable() {
  static const KernelTable table = MakeKernelTable<Avx2Vec>();
  return table;
}

}  // namespace zerotrain::optim::internal

#else  // not x86-64: ResolveSimdPath never selects this path.

namespace zerotrain::optim::internal {
const KernelTable& Avx2KernelTable() { return ScalarKernelTable(); }
}  // namespace zerotrain::optim::internal

#endif
