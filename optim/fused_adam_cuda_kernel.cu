// Fused multi-tensor Adam/AdamW for CUDA: each launch covers up to kMaxTensors tensors and
// kMaxBlocks chunks whose addresses travel in the kernel's parameter block (as apex's
// multi_tensor_apply does), so a step over many tensors needs no device-side metadata buffer.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "optim/fused_adam_cuda_kernel.h"

namespace zerotrain::optim::cuda {
namespace {

constexpr int kMaxTensors = 16;
constexpr int kMaxBlocks = 256;
constexpr int kThreads = 256;
constexpr int64_t kChunk = 65536;  // elements per block

struct LaunchList {
  Tensor tensors[kMaxTensors];
  int tensor_of_block[kMaxBlocks];
  int chunk_of_block[kMaxBlocks];
};

__device__ __forceinline__ float LoadGrad(const void* g, int8_t type, int64_t i) {
  if (type == kF32) return static_cast<const float*>(g)[i];
  const unsigned short bits = static_cast<const unsigned short*>(g)[i];
  if (type == kBF16) return __uint_as_float(static_cast<unsigned int>(bits) << 16);
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ unsigned short ToBFloat16(float x) {
  const unsigned int u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  return static_cast<unsigned short>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ void StoreOut(void* out, int8_t type, int64_t i, float x) {
  if (type == kF32) static_cast<float*>(out)[i] = x;
  if (type == kBF16) static_cast<unsigned short*>(out)[i] = ToBFloat16(x);
  if (type == kF16) static_cast<unsigned short*>(out)[i] = __half_as_ushort(__float2half_rn(x));
}

__global__ void FusedAdamKernel(LaunchList list, Scalars s) {
  const Tensor& t = list.tensors[list.tensor_of_block[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(list.chunk_of_block[blockIdx.x]) * kChunk;
  const int64_t end = min(t.size, begin + kChunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float g = LoadGrad(t.grads, t.grad_type, i) * s.grad_mul;
    float p = t.params[i];
    if (s.l2 != 0.0f) g = fmaf(s.l2, p, g);
    const float m = fmaf(s.beta1, t.exp_avg[i], s.one_minus_beta1 * g);
    const float v = fmaf(s.beta2, t.exp_avg_sq[i], (s.one_minus_beta2 * g) * g);
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
    float second = v;
    if (s.amsgrad) {
      second = fmaxf(t.max_exp_avg_sq[i], v);
      t.max_exp_avg_sq[i] = second;
    }
    const float denom = fmaf(sqrtf(second), s.inv_sqrt_bias2, s.eps);
    p = fmaf(-s.step_size, m / denom, p * s.param_decay);
    t.params[i] = p;
    if (t.out_type != kNone) StoreOut(t.params_out, t.out_type, i, p);
  }
}

}  // namespace

int LaunchFusedAdam(const Scalars& scalars, const Tensor* tensors, int count, void* stream) {
  LaunchList list;
  int n_tensors = 0, n_blocks = 0;
  auto flush = [&]() -> cudaError_t {
    if (n_blocks == 0) return cudaSuccess;
    FusedAdamKernel<<<n_blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(list, scalars);
    n_tensors = 0;
    n_blocks = 0;
    return cudaGetLastError();
  };
  for (int k = 0; k < count; ++k) {
    if (tensors[k].size == 0) continue;
    if (n_tensors == kMaxTensors) {
      if (cudaError_t e = flush(); e != cudaSuccess) return e;
    }
    list.tensors[n_tensors] = tensors[k];
    const int64_t chunks = (tensors[k].size + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      list.tensor_of_block[n_blocks] = n_tensors;
      list.chunk_of_block[n_blocks] = static_cast<int>(c);
      if (++n_blocks == kMaxBlocks) {
        // The tensor may continue in the next launch: keep it as that launch's first entry.
        if (cudaError_t e = flush(); e != cudaSuccess) return e;
        list.tensors[0] = tensors[k];
        n_tensors = 0;
      }
    }
    n_tensors = n_blocks == 0 ? 0 : n_tensors + 1;
  }
  return flush();
}

int DeviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace zerotrain::optim::cuda
