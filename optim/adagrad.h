// Fused Adagrad over flat fp32 shards with torch.optim.Adagrad semantics, gradient unscaling
// and an optional bf16/fp16 parameter copy.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "optim/precision.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double eps = 1e-10;
  // torch's initial_accumulator_value is the caller's: fill `sum` with it before step 1.
  double grad_scale = 1.0;  // gradients are divided by this (loss scale x clip factor)
  int threads = 0;
  SimdPath simd = SimdPath::kAuto;
};

struct AdagradShard {
  int64_t size = 0;
  float* params = nullptr;
  const void* grads = nullptr;
  DType grad_dtype = DType::kFloat32;
  float* sum = nullptr;  // running sum of squared gradients
  void* params_out = nullptr;
  DType params_out_dtype = DType::kBFloat16;
};

// Step `step` (1-based); the learning rate is lr / (1 + (step - 1) * lr_decay).
absl::Status FusedAdagradStep(const AdagradOptions& options, int64_t step,
                              absl::Span<const AdagradShard> shards);

inline absl::Status FusedAdagradStep(const AdagradOptions& options, int64_t step,
                                     const AdagradShard& shard) {
  return FusedAdagradStep(options, step, absl::MakeConstSpan(&shard, 1));
}

}  // namespace zerotrain::optim
