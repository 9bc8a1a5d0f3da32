// Fused SGD (momentum, dampening, Nesterov, L2 weight decay) over flat fp32 shards with
// torch.optim.SGD semantics, gradient unscaling and an optional bf16/fp16 parameter copy.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "optim/precision.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim {

struct SgdOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;    // needs momentum > 0 and dampening == 0, as in torch
  double grad_scale = 1.0;  // gradients are divided by this (loss scale x clip factor)
  int threads = 0;
  SimdPath simd = SimdPath::kAuto;
};

struct SgdShard {
  int64_t size = 0;
  float* params = nullptr;
  const void* grads = nullptr;
  DType grad_dtype = DType::kFloat32;
  float* momentum_buffer = nullptr;  // required when momentum != 0
  void* params_out = nullptr;
  DType params_out_dtype = DType::kBFloat16;
};

// Step `step` (1-based). On step 1 the momentum buffer is set to the gradient, as torch does
// when it creates the buffer; afterwards buf = momentum * buf + (1 - dampening) * grad.
absl::Status FusedSgdStep(const SgdOptions& options, int64_t step,
                          absl::Span<const SgdShard> shards);

inline absl::Status FusedSgdStep(const SgdOptions& options, int64_t step, const SgdShard& shard) {
  return FusedSgdStep(options, step, absl::MakeConstSpan(&shard, 1));
}

}  // namespace zerotrain::optim
