// Fused multi-tensor Adam/AdamW on a CUDA device: the same options, shards and results as
// FusedAdamStep (adam.h), with every pointer in AdamShard a device pointer. Built for real only
// under --config=cuda; otherwise the step reports UNIMPLEMENTED.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "optim/adam.h"

namespace zerotrain::optim {

// True when this binary was built with CUDA support.
bool BuiltWithCuda();

// Number of visible CUDA devices (0 without CUDA support, a driver or a device).
int CudaDeviceCount();

// Enqueues step `step` for all shards on `cuda_stream` (a cudaStream_t; null = LibTorch's current
// stream of the current device) and returns without waiting. options.threads and options.simd are
// ignored.
absl::Status FusedAdamStepCuda(const AdamOptions& options, int64_t step,
                               absl::Span<const AdamShard> shards, void* cuda_stream = nullptr);

}  // namespace zerotrain::optim
