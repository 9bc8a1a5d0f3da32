// Block-wise symmetric INT8 quantization: the wire format of ZeRO++'s quantized weight gather
// (qwZ, comm/quantized_all_gather.h). Each block of at most kInt8MaxBlock elements keeps one fp32
// scale, max|x| / 127, and each element x * (127 / max|x|) rounded to the nearest integer (ties
// to even), so a block whose values are integer multiples of a power-of-two scale round-trips
// exactly and any other value is off by at most about scale / 2. A block holding a NaN or an
// infinity gets a NaN scale: every element of it dequantizes to NaN, so a diverged weight stays
// visible to overflow checks instead of being rounded into finite garbage. A block whose largest
// magnitude is below kInt8Tiny (where 127 / max would overflow) comes back as zeros.
//
// The kernels run on AVX-512, AVX2 or scalar code chosen at run time (tools/cpu_dispatch.h); every
// path gives the same bits, so ranks on machines with different instruction sets agree.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "absl/status/status.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::comm {

// DeepSpeed's qwZ aims for groups below 8000 elements ("the optimal size is 4k").
inline constexpr int64_t kInt8MaxBlock = 8000;
inline constexpr float kInt8Tiny = 1e-30f;

// The block size for a buffer of `numel` elements: the fewest blocks of at most kInt8MaxBlock,
// made equal and rounded up to a multiple of 8 (the last block may be shorter). Where DeepSpeed's
// adaptive grouping finds numel / groups a multiple of 8 at its first try, the sizes agree.
int64_t Int8BlockSize(int64_t numel);
inline int64_t Int8BlockCount(int64_t numel, int64_t block) {
  return block > 0 ? (numel + block - 1) / block : 0;
}

// x: `numel` elements of `dtype` (float, bfloat16 or half). Writes q[numel] and
// scales[Int8BlockCount(numel, block)]. Splits the blocks across LibTorch's intra-op threads.
absl::Status QuantizeInt8(const void* x, at::ScalarType dtype, int64_t numel, int64_t block,
                          int8_t* q, float* scales, SimdPath path = SimdPath::kAuto);
// The inverse: out[i] = q[i] * scale of its block, written as `dtype` (rounded to nearest even).
absl::Status DequantizeInt8(const int8_t* q, const float* scales, int64_t numel, int64_t block,
                            void* out, at::ScalarType dtype, SimdPath path = SimdPath::kAuto);

namespace internal {

enum class Elem { kF32, kBf16, kF16 };

// One instruction set's kernels over a range of whole blocks [first, last) (the last one may be
// short: it ends at numel).
struct Int8Kernels {
  void (*quantize)(const void* x, Elem elem, int64_t numel, int64_t block, int64_t first,
                   int64_t last, int8_t* q, float* scales);
  void (*dequantize)(const int8_t* q, const float* scales, int64_t numel, int64_t block,
                     int64_t first, int64_t last, void* out, Elem elem);
};
const Int8Kernels& ScalarInt8Kernels();
const Int8Kernels& Avx2Int8Kernels();
const Int8Kernels& Avx512Int8Kernels();

}  // namespace internal
}  // namespace zerotrain::comm
