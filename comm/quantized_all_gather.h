// QuantizedAllGatherAsync: ProcessGroup::AllGatherAsync with the wire in INT8 blocks, ZeRO++'s
// quantized weight gather (qwZ). Each rank quantizes its shard (comm/int8_blocks.h: blocks of at
// most 8000 elements, one fp32 scale each), the ranks all-gather the bytes, and each dequantizes
// every rank's part, its own included, into the output, so every rank holds the same values.
// Only the wire is quantized: the shard itself is not changed. On the wire (int8_parts.h) a shard
// of m elements costs m + 4 * ceil(m / block) bytes instead of m * element_size (about 26% of
// fp32, 51% of bf16). The op log records it as an all-gather of those bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "comm/process_group.h"
#include "comm/work.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::comm {

struct QuantizedGatherOptions {
  SimdPath simd = SimdPath::kAuto;  // the CPU kernels' instruction set (tests force each)
};

// As AllGatherAsync: `shard` has ShardNumel(n, world) elements, `output` n (contiguous; a
// [world, m] view is not taken), float, bfloat16 or half, both of one dtype. Quantizing runs on
// the calling thread before the gather starts, dequantizing when the Work is waited for. CPU
// tensors take the vector kernels; tensors on a device take the same arithmetic in ATen
// operations there (never run on a GPU yet).
Work QuantizedAllGatherAsync(ProcessGroup& group, at::Tensor shard, at::Tensor output,
                             const QuantizedGatherOptions& options = {});
absl::Status QuantizedAllGather(ProcessGroup& group, at::Tensor shard, at::Tensor output,
                                const QuantizedGatherOptions& options = {});

// The bytes one rank's shard of `shard_numel` elements occupies on the wire (rounded up to 4,
// so every rank's scales stay aligned).
int64_t QuantizedShardBytes(int64_t shard_numel);

}  // namespace zerotrain::comm
