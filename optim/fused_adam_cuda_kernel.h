// The boundary between fused_adam_cuda.cc (gcc) and fused_adam_cuda_kernel.cu (nvcc): plain
// structs and functions only, so nvcc never sees Abseil or LibTorch headers.
#pragma once

#include <cstdint>

namespace zerotrain::optim::cuda {

// Element type codes, matching optim::DType's order; kNone = no parameter copy.
enum : int8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kNone = 3 };

struct Tensor {
  float* params;
  const void* grads;
  float* exp_avg;
  float* exp_avg_sq;
  float* max_exp_avg_sq;  // null unless amsgrad
  void* params_out;       // null when no copy
  int64_t size;
  int8_t grad_type;
  int8_t out_type;
};

struct Scalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, step_size, inv_sqrt_bias2;
  float param_decay, l2, grad_mul;
  bool amsgrad;
};

// Launches the multi-tensor kernel over `count` tensors (device pointers) on `stream` (a
// cudaStream_t, null = default stream). Returns a cudaError_t value (0 = success).
int LaunchFusedAdam(const Scalars& scalars, const Tensor* tensors, int count, void* stream);

// cudaGetDeviceCount's answer, 0 on any error; and the text of a cudaError_t.
int DeviceCount();
const char* ErrorString(int error);

}  // namespace zerotrain::optim::cuda
