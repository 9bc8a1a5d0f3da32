// Fused Adam / AdamW over flat fp32 shards (ZeRO's optimizer state), with torch.optim.Adam and
// AdamW semantics: one pass reads param, grad and both moments once and writes them once,
// unscaling the gradient and optionally writing a bf16/fp16 copy of the new parameters.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "optim/kernels.h"
#include "optim/precision.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;          // added after the square root, as torch does
  double weight_decay = 0.0;  // L2 added to the gradient (Adam) or decoupled (AdamW)
  bool adamw = false;
  bool bias_correction = true;
  bool amsgrad = false;
  // Gradients are divided by this before use: the loss scale, times the clip factor when
  // clipping (see CombinedGradScale in clip_grad.h). 1 means the gradients are already true.
  double grad_scale = 1.0;
  int threads = 0;                  // 0 = all cores
  SimdPath simd = SimdPath::kAuto;  // force a path (tests); kAuto also honours ZT_SIMD
};

// One contiguous piece of the flat parameter space. State arrays start at zero before step 1.
struct AdamShard {
  int64_t size = 0;
  float* params = nullptr;
  const void* grads = nullptr;
  DType grad_dtype = DType::kFloat32;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* max_exp_avg_sq = nullptr;  // required with amsgrad
  void* params_out = nullptr;       // optional copy of the updated params
  DType params_out_dtype = DType::kBFloat16;
};

// Applies optimizer step number `step` (1 for the first step, as torch's state["step"] after its
// increment) to every shard. Shards may be empty, unaligned and of any length.
absl::Status FusedAdamStep(const AdamOptions& options, int64_t step,
                           absl::Span<const AdamShard> shards);

inline absl::Status FusedAdamStep(const AdamOptions& options, int64_t step,
                                  const AdamShard& shard) {
  return FusedAdamStep(options, step, absl::MakeConstSpan(&shard, 1));
}

namespace internal {
// Shared with the CUDA front end (fused_adam_cuda.cc), so both devices check the same options
// and fold the same per-step scalars (in double, once per step).
absl::Status CheckAdamOptions(const AdamOptions& options, int64_t step);
// Shard `index`'s pointers (max_exp_avg_sq only with amsgrad), named in the error.
absl::Status CheckAdamShard(const AdamOptions& options, size_t index, const AdamShard& shard);
AdamScalars MakeAdamScalars(const AdamOptions& options, int64_t step);
}  // namespace internal

}  // namespace zerotrain::optim
