// Local sum of squares (parallel, deterministic) and the clip factors of clip_grad.h.
#include "optim/clip_grad.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/shard_step.h"
#include "tools/status_macros.h"

namespace zerotrain::optim {

absl::StatusOr<double> LocalSumOfSquares(absl::Span<const GradShard> shards,
                                         const GradReductionOptions& options) {
  ZT_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, internal::CheckGradShards(shards));
  std::vector<double> partial(internal::CountChunks(sizes), 0.0);
  ZT_RETURN_IF_ERROR(internal::RunOnShards(
      options.simd, options.threads, sizes,
      [&](const internal::KernelTable& table, int64_t chunk, size_t s, int64_t begin, int64_t end) {
        partial[chunk] = table.sum_squares(shards[s].data, shards[s].dtype, begin, end);
      }));
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

absl::StatusOr<double> ClipCoefficient(double global_norm, double max_norm) {
  if (!std::isfinite(global_norm) || global_norm < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_norm = ", global_norm, " is not a finite norm"));
  }
  if (!(max_norm > 0) || !std::isfinite(max_norm)) {
    return absl::InvalidArgumentError(absl::StrCat("max_norm = ", max_norm, " must be > 0"));
  }
  const double coefficient = max_norm / (global_norm + 1e-6);
  return coefficient < 1.0 ? coefficient : 1.0;
}

absl::StatusOr<double> CombinedGradScale(double loss_scale, double scaled_global_norm,
                                         double max_norm) {
  if (!(loss_scale > 0) || !std::isfinite(loss_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale = ", loss_scale, " must be finite and > 0"));
  }
  if (!std::isfinite(scaled_global_norm) || scaled_global_norm < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaled_global_norm = ", scaled_global_norm,
        " is not a finite norm: the step overflowed and must be skipped, not clipped"));
  }
  if (max_norm <= 0) return loss_scale;
  const double clip = (scaled_global_norm / loss_scale + 1e-6) / max_norm;
  return clip > 1.0 ? clip * loss_scale : loss_scale;
}

}  // namespace zerotrain::optim
