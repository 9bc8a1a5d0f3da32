// LocalGradStats: what the optimizer step must learn of this rank's gradients before it runs,
// whether any is inf/NaN (fp16's loss scaler then skips the step) and their sum of squares (the
// global-norm clipping), as one small tensor on the gradients' device. The engine agrees it
// across ranks in one collective and the host reads it once per step, the step's one host
// synchronisation on a GPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::engine {

struct GradStatsRequest {
  bool overflow = false;        // entry 0: 1 when some gradient is inf or NaN, else 0
  bool sum_of_squares = false;  // entry 1: the sum of every gradient's square (else 0)
};

// A float64 tensor [overflow, sum of squares] on the gradients' device (CPU for none). CPU
// gradients go through optim's SIMD kernels (float lanes summed in float64, as the CPU clipping
// always did); other devices through ATen's reductions (float accumulation per tensor, float64
// across them), whose non-finite sum also
// marks an overflow. All grads must be on one device.
absl::StatusOr<at::Tensor> LocalGradStats(const std::vector<at::Tensor>& grads,
                                          const GradStatsRequest& request);

// The ATen form LocalGradStats uses off the host; it runs on CPU tensors too, which is how the
// CPU tests check it against the host kernels. Throws c10::Error like the ATen calls it makes.
at::Tensor AtenGradStats(const std::vector<at::Tensor>& grads, const GradStatsRequest& request);

}  // namespace zerotrain::engine
