// The portable path: the kernels of kernels_body.h over a one-lane "vector" of plain floats.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "optim/kernels.h"
#include "optim/precision.h"

namespace zerotrain::optim::internal {
namespace {

// One lane held in double: the portable path is not bandwidth-bound, so it can afford to round
// only when storing to the fp32 (or bf16/fp16) buffers, which keeps it closest to the references.
struct ScalarVec {
  static constexpr int kWidth = 1;
  double v;

  static ScalarVec Set(float x) { return {x}; }
  static ScalarVec Load(const float* p) { return {*p}; }
  static ScalarVec LoadBf16(const uint16_t* p) { return {BFloat16ToFloat(*p)}; }
  static ScalarVec LoadHalf(const uint16_t* p) { return {HalfToFloat(*p)}; }
  void Store(float* p) const { *p = static_cast<float>(v); }
  void StoreBf16(uint16_t* p) const { *p = FloatToBFloat16(static_cast<float>(v)); }
  void StoreHalf(uint16_t* p) const { *p = FloatToHalf(static_cast<float>(v)); }
  static ScalarVec Fma(ScalarVec a, ScalarVec b, ScalarVec c) { return {a.v * b.v + c.v}; }
  static ScalarVec Sqrt(ScalarVec a) { return {std::sqrt(a.v)}; }
  static ScalarVec Max(ScalarVec a, ScalarVec b) { return {a.v > b.v ? a.v : b.v}; }
  double ReduceAdd() const { return v; }
};

inline ScalarVec operator+(ScalarVec a, ScalarVec b) { return {a.v + b.v}; }
inline ScalarVec operator-(ScalarVec a, ScalarVec b) { return {a.v - b.v}; }
inline ScalarVec operator*(ScalarVec a, ScalarVec b) { return {a.v * b.v}; }
inline ScalarVec operator/(ScalarVec a, ScalarVec b) { return {a.v / b.v}; }

}  // namespace
}  // namespace zerotrain::optim::internal

#include "optim/kernels_body.h"

namespace zerotrain::optim::internal {

const KernelTable& ScalarKernelTable() {
  static const KernelTable table = MakeKernelTable<ScalarVec>();
  return table;
}

}  // namespace zerotrain::optim::internal
