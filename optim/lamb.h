// LAMB (You et al., "Large Batch Optimization for Deep Learning") over flat fp32 shards, with
// DeepSpeed FusedLamb's maths: the update direction u = m / (sqrt(v) + eps) + weight_decay * p
// without bias correction, the trust ratio |p| / |u| clamped to [min_coeff, max_coeff], and
// p -= lr * sqrt(bc2) / bc1 * trust * u. The trust ratio needs the norms of whole tensors,
// and under ZeRO a tensor may be cut across shards and ranks, so the step has two passes: the
// caller sums each tensor's norms between them (across its shards, and ranks via all-reduce).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "optim/precision.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim {

struct LambOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;  // must be > 0
  // FusedLamb's eps_inside_sqrt: u = m / sqrt(v + eps) + weight_decay * p.
  bool eps_inside_sqrt = false;
  double weight_decay = 0.0;
  bool bias_correction = true;  // into the step size: lr * sqrt(1 - beta2^t) / (1 - beta1^t)
  double max_coeff = 10.0;      // trust ratio clamp, DeepSpeed FusedLamb's defaults
  double min_coeff = 0.01;
  double grad_scale = 1.0;  // gradients are divided by this (loss scale x clip factor)
  int threads = 0;
  SimdPath simd = SimdPath::kAuto;
};

struct LambShard {
  int64_t size = 0;
  float* params = nullptr;
  const void* grads = nullptr;
  DType grad_dtype = DType::kFloat32;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* params_out = nullptr;
  DType params_out_dtype = DType::kBFloat16;
};

// Squared norms of one shard's parameters and of its update direction.
struct LambNorms {
  double param_sq = 0.0;
  double update_sq = 0.0;
};

// Pass 1 of step `step` (1-based): m and v are updated in place and each shard's squared norms
// are returned, in shard order.
absl::StatusOr<std::vector<LambNorms>> LambUpdateMoments(const LambOptions& options, int64_t step,
                                                         absl::Span<const LambShard> shards);

// The trust ratio of a tensor from its total squared norms: |p| / |u| clamped to
// [min_coeff, max_coeff], or 1 when either norm is 0.
double LambTrustRatio(const LambOptions& options, const LambNorms& tensor);

// Pass 2: p -= step_size * trust_ratios[i] * u for shard i (u recomputed from the moments).
absl::Status LambApplyUpdate(const LambOptions& options, int64_t step,
                             absl::Span<const LambShard> shards,
                             absl::Span<const double> trust_ratios);

// Both passes for shards that are whole tensors (nothing to reduce in between).
absl::Status FusedLambStep(const LambOptions& options, int64_t step,
                           absl::Span<const LambShard> shards);

}  // namespace zerotrain::optim
