// Host side of the CUDA Adam step: the CPU path's option checks and per-step scalars, then one
// multi-tensor launch sequence (fused_adam_cuda_kernel.cu). Without ZT_WITH_CUDA a stub.
#include "optim/fused_adam_cuda.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/shard_step.h"
#include "tools/status_macros.h"

#ifdef ZT_WITH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "optim/fused_adam_cuda_kernel.h"
#endif

namespace zerotrain::optim {

#ifdef ZT_WITH_CUDA

bool BuiltWithCuda() { return true; }

int CudaDeviceCount() { return cuda::DeviceCount(); }

absl::Status FusedAdamStepCuda(const AdamOptions& options, int64_t step,
                               absl::Span<const AdamShard> shards, void* cuda_stream) {
  ZT_RETURN_IF_ERROR(internal::CheckAdamOptions(options, step));
  std::vector<cuda::Tensor> tensors;
  for (size_t i = 0; i < shards.size(); ++i) {
    const AdamShard& s = shards[i];
    ZT_RETURN_IF_ERROR(internal::CheckAdamShard(options, i, s));
    tensors.push_back({s.params, s.grads, s.exp_avg, s.exp_avg_sq,
                       options.amsgrad ? s.max_exp_avg_sq : nullptr, s.params_out, s.size,
                       static_cast<int8_t>(s.grad_dtype),
                       static_cast<int8_t>(s.params_out ? static_cast<int>(s.params_out_dtype)
                                                        : static_cast<int>(cuda::kNone))});
  }
  const internal::AdamScalars a = internal::MakeAdamScalars(options, step);
  const cuda::Scalars k{a.beta1, a.beta2,     a.one_minus_beta1, a.one_minus_beta2,
                        a.eps,   a.step_size, a.inv_sqrt_bias2,  a.param_decay,
                        a.l2,    a.grad_mul,  a.amsgrad};
  // LibTorch's current stream of the current device, so the step is ordered after the
  // reductions and backward that produced the gradients, whichever stream the caller runs on.
  if (cuda_stream == nullptr) cuda_stream = c10::cuda::getCurrentCUDAStream().stream();
  const int error =
      cuda::LaunchFusedAdam(k, tensors.data(), static_cast<int>(tensors.size()), cuda_stream);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("FusedAdamStepCuda: launch over ", tensors.size(),
                                            " shards failed: ", cuda::ErrorString(error)));
  }
  return absl::OkStatus();
}

#else  // built without --config=cuda

bool BuiltWithCuda() { return false; }

int CudaDeviceCount() { return 0; }

absl::Status FusedAdamStepCuda(const AdamOptions&, int64_t, absl::Span<const AdamShard>, void*) {
  return absl::UnimplementedError(
      "FusedAdamStepCuda: this binary was built without CUDA (build with --config=cuda)");
}

#endif

}  // namespace zerotrain::optim
