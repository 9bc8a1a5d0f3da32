// The INT8 block kernels, written once over a vector type `V` (int8_blocks_{scalar,avx2,avx512}.cc
// each define theirs, switch on their target and include this file). Internal linkage throughout:
// each instruction set gets its own copy. Tails shorter than a vector run the scalar arithmetic,
// which is the same IEEE operations (one multiply, round to nearest even), so every path agrees
// bit for bit.
//
// V provides: kWidth; Load(const float*/const uint16_t* bf16/const uint16_t* half via LoadBf16,
// LoadHalf); MaxAbsBits(acc, v) and ReduceMaxBits(acc) over the sign-cleared bit patterns;
// StoreQ(v, inv, int8_t*) (multiply, round, clamp to +-127, narrow); LoadQ(const int8_t*, scale);
// Store/StoreBf16/StoreHalf.
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "comm/int8_blocks.h"

namespace zerotrain::comm::internal {
namespace {

inline uint32_t AbsBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b & 0x7FFFFFFFu;
}

inline float ScalarLoad(const void* x, Elem e, int64_t i) {
  if (e == Elem::kF32) return static_cast<const float*>(x)[i];
  const uint16_t h = static_cast<const uint16_t*>(x)[i];
  if (e == Elem::kF16) return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline void ScalarStore(void* out, Elem e, int64_t i, float v) {
  if (e == Elem::kF32) {
    static_cast<float*>(out)[i] = v;
    return;
  }
  uint16_t h;
  if (e == Elem::kF16) {
    h = c10::Half(v).x;
  } else if (std::isnan(v)) {
    h = 0x7FC0;
  } else {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    h = static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
  }
  static_cast<uint16_t*>(out)[i] = h;
}

inline int8_t ScalarQ(float x, float inv) {
  const float r = std::nearbyint(x * inv);  // the default rounding mode: to nearest even
  return static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, r)));
}

template <class V>
inline V VLoad(const void* x, Elem e, int64_t i) {
  if (e == Elem::kF32) return V::Load(static_cast<const float*>(x) + i);
  if (e == Elem::kBf16) return V::LoadBf16(static_cast<const uint16_t*>(x) + i);
  return V::LoadHalf(static_cast<const uint16_t*>(x) + i);
}

template <class V>
inline void VStore(void* out, Elem e, int64_t i, V v) {
  if (e == Elem::kF32) return v.Store(static_cast<float*>(out) + i);
  if (e == Elem::kBf16) return v.StoreBf16(static_cast<uint16_t*>(out) + i);
  v.StoreHalf(static_cast<uint16_t*>(out) + i);
}

template <class V>
void QuantizeBlocks(const void* x, Elem e, int64_t numel, int64_t block, int64_t first,
                    int64_t last, int8_t* q, float* scales) {
  constexpr int W = V::kWidth;
  for (int64_t k = first; k < last; ++k) {
    const int64_t begin = k * block, end = std::min(numel, begin + block);
    auto acc = V::ZeroBits();
    int64_t i = begin;
    for (; i + W <= end; i += W) acc = V::MaxAbsBits(acc, VLoad<V>(x, e, i));
    uint32_t bits = V::ReduceMaxBits(acc);
    for (; i < end; ++i) bits = std::max(bits, AbsBits(ScalarLoad(x, e, i)));
    if (bits >= 0x7F800000u) {  // NaN or infinity
      scales[k] = std::numeric_limits<float>::quiet_NaN();
      std::memset(q + begin, 0, end - begin);
      continue;
    }
    float absmax;
    std::memcpy(&absmax, &bits, 4);
    if (absmax < kInt8Tiny) {  // 127 / absmax could overflow: the block comes back as zeros
      scales[k] = 0.0f;
      std::memset(q + begin, 0, end - begin);
      continue;
    }
    scales[k] = absmax / 127.0f;
    const float inv = 127.0f / absmax;
    i = begin;
    for (; i + W <= end; i += W) V::StoreQ(VLoad<V>(x, e, i), inv, q + i);
    for (; i < end; ++i) q[i] = ScalarQ(ScalarLoad(x, e, i), inv);
  }
}

template <class V>
void DequantizeBlocks(const int8_t* q, const float* scales, int64_t numel, int64_t block,
                      int64_t first, int64_t last, void* out, Elem e) {
  constexpr int W = V::kWidth;
  for (int64_t k = first; k < last; ++k) {
    const int64_t begin = k * block, end = std::min(numel, begin + block);
    const float scale = scales[k];
    int64_t i = begin;
    for (; i + W <= end; i += W) VStore<V>(out, e, i, V::LoadQ(q + i, scale));
    for (; i < end; ++i) ScalarStore(out, e, i, static_cast<float>(q[i]) * scale);
  }
}

template <class V>
Int8Kernels MakeInt8Kernels() {
  return {&QuantizeBlocks<V>, &DequantizeBlocks<V>};
}

}  // namespace
}  // namespace zerotrain::comm::internal
