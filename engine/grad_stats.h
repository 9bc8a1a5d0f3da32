// Gradient statistics: what the optimizer step must learn of this rank's gradients before it runs,
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

// The float64 tensor [overflow, sum of squares] of gradients in host memory, through optim's SIMD
// kernels (float lanes summed in float64, as the CPU clipping always did). A DeviceRuntime
// (device_runtime.h) chooses this or the ATen form for the memory its gradients are in.
absl::StatusOr<at::Tensor> HostGradStats(const std::vector<at::Tensor>& grads,
                                         const GradStatsRequest& request);

// The same through ATen's reductions (float accumulation per tensor, float64 across them, whose
// non-finite sum also marks an overflow), as a tensor on `device`: what a GPU runs. It runs on CPU
// tensors too, which is how the CPU tests check it against the host kernels. Throws c10::Error
// like the ATen calls it makes.
at::Tensor AtenGradStats(const std::vector<at::Tensor>& grads, const GradStatsRequest& request,
                         c10::Device device = c10::Device(c10::kCPU));

}  // namespace zerotrain::engine
