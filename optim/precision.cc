// Names, sizes and bulk conversions of the element types in precision.h.
#include "optim/precision.h"

namespace zerotrain::optim {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  return "unknown";
}

int DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

void ConvertToFloat(const void* src, DType src_dtype, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadAsFloat(src, src_dtype, i);
}

void ConvertFromFloat(const float* src, void* dst, DType dst_dtype, int64_t n) {
  for (int64_t i = 0; i < n; ++i) StoreFromFloat(dst, dst_dtype, i, src[i]);
}

}  // namespace zerotrain::optim
