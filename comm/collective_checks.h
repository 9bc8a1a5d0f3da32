// Exact checks of every collective against a scalar reference, shared by the Gloo and NCCL tests.
// Inputs are small integers, so sums and averages are exact in bf16 and fp16 too and results are
// compared with ==.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "comm/process_group.h"

namespace zerotrain::comm {

// Runs all-reduce (sum, max, avg), reduce-scatter, all-gather and broadcast for element counts
// 0, 1, 7, 1000 and 2^20+3 and dtypes fp32, bf16, fp16, int32, int64 on tensors of `device`;
// returns the first result that differs from the reference, naming op, dtype, count and element.
absl::Status CheckEveryCollective(ProcessGroup& group, const at::Device& device);

}  // namespace zerotrain::comm
