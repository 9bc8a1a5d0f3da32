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

#include "tools/simd_avx512.h"

namespace zerotrain::optim::internal {
namespace {

struct Avx512Vec {
  static constexpr int kWidth = 16;
  __m512 v;

  static Avx512Vec Set(float x) { return {_mm512_set1_ps(x)}; }
  static Avx512Vec Load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Avx512Vec LoadBf16(const uint16_t* p) { return {simd::LoadBf16x16(p)}; }
  static Avx512Vec LoadHalf(const uint16_t* p) { return {simd::LoadHalfx16(p)}; }
  void Store(float* p) const { _mm512_storeu_ps(p, v); }
  void StoreBf16(uint16_t* p) const { simd::StoreBf16x16(p, v); }
  void StoreHalf(uint16_t* p) const { simd::StoreHalfx16(p, v); }
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
