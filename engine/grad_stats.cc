// Overflow flag and sum of squares of the gradient shards, in two forms: optim's SIMD loops for
// host memory, ATen reductions for a device.
#include "engine/grad_stats.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/optim_dtype.h"
#include "optim/clip_grad.h"
#include "optim/overflow_check.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::StatusOr<at::Tensor> HostGradStats(const std::vector<at::Tensor>& grads,
                                         const GradStatsRequest& request) {
  std::vector<optim::GradShard> shards;
  for (const at::Tensor& g : grads) {
    shards.push_back({g.data_ptr(), g.numel(), ToOptimDtype(g.scalar_type())});
  }
  bool overflow = false;
  double squares = 0;
  if (request.sum_of_squares) {
    // One pass for both: inf/NaN anywhere makes the sum non-finite (as on a device, below).
    ZT_ASSIGN_OR_RETURN(squares, optim::LocalSumOfSquares(shards));
    overflow = request.overflow && !std::isfinite(squares);
  } else if (request.overflow) {
    ZT_ASSIGN_OR_RETURN(overflow, optim::HasInfOrNan(shards));
  }
  at::Tensor out = at::empty({2}, at::kDouble);
  out[0] = overflow ? 1.0 : 0.0;
  out[1] = squares;
  return out;
}

at::Tensor AtenGradStats(const std::vector<at::Tensor>& grads, const GradStatsRequest& request,
                         c10::Device device) {
  at::Tensor squares = at::zeros({}, at::TensorOptions(at::kDouble).device(device));
  for (const at::Tensor& g : grads) {
    if (g.numel() == 0) continue;
    // The norm accumulates in float without a float copy of bf16/fp16 gradients; squaring it in
    // float64 keeps fp16's largest sums finite, so only inf/NaN inputs make it non-finite.
    const at::Tensor norm = at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat);
    squares.add_(norm.to(at::kDouble).square());
  }
  at::Tensor overflow = at::isfinite(squares).logical_not().to(at::kDouble);
  if (!request.overflow) overflow.zero_();
  if (!request.sum_of_squares) squares.zero_();
  return at::stack({overflow, squares});
}

}  // namespace zerotrain::engine
