// Element types of gradient shards and parameter copies, with our own fp32 <-> bf16/fp16
// conversions (round to nearest even), so the kernels need no LibTorch.
#pragma once

#include <cstdint>
#include <cstring>

namespace zerotrain::optim {

enum class DType { kFloat32, kBFloat16, kFloat16 };

const char* DTypeName(DType dtype);

// A read-only flat shard of `size` elements of `dtype` (gradients, for the checks and norms).
struct GradShard {
  const void* data = nullptr;
  int64_t size = 0;
  DType dtype = DType::kFloat32;
};
int DTypeSize(DType dtype);

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float BFloat16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

// Adds half an ulp of bf16, plus one when the kept part is odd, so ties go to even. NaN needs its
// own case: the addition could carry a NaN with a small payload into infinity.
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;  // quiet NaN, as c10::BFloat16
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return BitsToFloat(FloatBits(magnitude) | sign);
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7E00u;   // NaN: quiet, as c10::Half does
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {
    // Below fp16's smallest normal (2^-14): adding 0.5 lines the fp16 subnormal grid up with
    // fp32's last mantissa bits, and the FPU's own rounding is round-to-nearest-even.
    const float shifted = BitsToFloat(magnitude) + 0.5f;
    return sign | static_cast<uint16_t>(FloatBits(shifted) - 0x3F000000u);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even; a carry
  // out of the mantissa correctly bumps the exponent.
  const uint32_t odd = (magnitude >> 13) & 1u;
  const uint32_t rebased = magnitude - (112u << 23) + 0xFFFu + odd;
  return sign | static_cast<uint16_t>(rebased >> 13);
}

// Loads element i of a buffer of `dtype` as fp32.
inline float LoadAsFloat(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0f;
}

// Stores fp32 `value` into element i of a buffer of `dtype`, rounding to nearest even.
inline void StoreFromFloat(void* data, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(data)[i] = value;
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToBFloat16(value);
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToHalf(value);
      return;
  }
}

// Bulk conversions over n elements (scalar; for set-up and tests, not the hot path).
void ConvertToFloat(const void* src, DType src_dtype, float* dst, int64_t n);
void ConvertFromFloat(const float* src, void* dst, DType dst_dtype, int64_t n);

}  // namespace zerotrain::optim
