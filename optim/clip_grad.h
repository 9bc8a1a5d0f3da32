// Gradient clipping by global norm for sharded gradients: each rank computes the sum of squares
// of its own shards, the caller all-reduces the sums, and the factor that results is folded into
// the optimizer step's grad_scale together with the loss scale, so the gradients are never
// rewritten in memory.
#pragma once

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "optim/overflow_check.h"
#include "optim/precision.h"

namespace zerotrain::optim {

// Sum of x*x over every element of every shard: fp32 products summed in fp32 lanes of at most
// 128 terms, those partial sums added up in double in a fixed order (the result does not depend
// on the thread count). Inf or NaN in the input gives inf or NaN.
absl::StatusOr<double> LocalSumOfSquares(absl::Span<const GradShard> shards,
                                         const GradReductionOptions& options = {});

// torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (global_norm + 1e-6)), the number
// to multiply true (unscaled) gradients by.
absl::StatusOr<double> ClipCoefficient(double global_norm, double max_norm);

// DeepSpeed's combined unscale-and-clip divisor (its fp16 optimizers' unscale_and_clip_grads):
// the optimizer's grad_scale for gradients that still carry `loss_scale`, given the global norm
// of those scaled gradients. Without clipping (max_norm <= 0) it is loss_scale; with clipping
// it is loss_scale * c where c = (scaled_global_norm / loss_scale + 1e-6) / max_norm, when c > 1.
// A non-finite norm is an error: an overflowed step must be skipped, not clipped.
absl::StatusOr<double> CombinedGradScale(double loss_scale, double scaled_global_norm,
                                         double max_norm);

}  // namespace zerotrain::optim
