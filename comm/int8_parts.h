// One buffer's INT8 wire form, as the quantized collectives (quantized_all_gather.h,
// quantized_reduce_scatter.h) send it: [scales: 4 * blocks bytes][codes: numel bytes][padding to
// 4], blocks of Int8BlockSize(numel) (int8_blocks.h). CPU tensors go through the vector kernels;
// tensors on a device through the same arithmetic in ATen operations there (never run on a GPU
// yet).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/status.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::comm {

struct Int8Part {
  int64_t numel = 0;
  int64_t block = 1;
  int64_t blocks = 0;
  int64_t bytes = 0;  // on the wire, a multiple of 4 so that parts laid end to end stay aligned
};
Int8Part Int8PartOf(int64_t numel);

// x (numel elements, float, bfloat16 or half) into `part` (Int8PartOf(numel).bytes bytes).
absl::Status QuantizePart(const at::Tensor& x, at::Tensor part, SimdPath simd = SimdPath::kAuto);
// A part of `numel` elements back into `out` (its first out.numel() <= numel elements, the
// out's dtype).
absl::Status DequantizePart(const at::Tensor& part, int64_t numel, at::Tensor out,
                            SimdPath simd = SimdPath::kAuto);

namespace internal {
// The device form, exposed so the CPU tests can hold it to the kernels.
void QuantizePartWithAtenOps(const at::Tensor& x, at::Tensor part);
void DequantizePartWithAtenOps(const at::Tensor& part, int64_t numel, at::Tensor out);
}  // namespace internal

}  // namespace zerotrain::comm
