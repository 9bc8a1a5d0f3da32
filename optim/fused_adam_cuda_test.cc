// FusedAdamStepCuda against the CPU FusedAdamStep over 200 steps, for every gradient and copy
// precision, amsgrad, and enough tensors and chunks to need several launches. Skips, saying
// why, when built without --config=cuda or when no device is present.
#include "optim/fused_adam_cuda.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "optim/adam.h"
#include "optim/optim_testing.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zerotrain::optim {
namespace {

#ifndef ZT_WITH_CUDA
TEST(FusedAdamCudaTest, WithoutCudaTheStepIsUnimplemented) {
  EXPECT_FALSE(BuiltWithCuda());
  EXPECT_EQ(CudaDeviceCount(), 0);
  EXPECT_EQ(FusedAdamStepCuda(AdamOptions(), 1, {}).code(), absl::StatusCode::kUnimplemented);
}
#endif

TEST(FusedAdamCudaTest, MatchesCpuOver200Steps) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without --config=cuda: no CUDA kernel to test";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
#ifdef ZT_WITH_CUDA
  // 20 tensors (more than one launch holds), one of 300 chunks of 64K (more than 256 blocks).
  std::vector<int64_t> sizes = {0, 1, 17, 300 * 65536 + 5};
  for (int i = 0; i < 17; ++i) sizes.push_back(1000 + 37 * i);
  int64_t n = 0;
  for (int64_t s : sizes) n += s;
  // One random gradient per precision, uploaded once; step t uses it rotated by t * kShift
  // elements (on the host for the CPU step, device to device for the kernel), so each element sees
  // a different value every step without drawing 20M normals per step (which took the check past
  // its time limit on an H200 machine).
  constexpr int64_t kShift = 7919;
  const std::vector<float> base = testing::RandomNormal(n, 100, 8.0f);
  for (DType grad_dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (bool amsgrad : {false, true}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(grad_dtype) << " amsgrad " << amsgrad);
      const int gsize = DTypeSize(grad_dtype);
      std::vector<char> g0(n * gsize), g(n * gsize);
      if (grad_dtype == DType::kFloat32) {
        std::memcpy(g0.data(), base.data(), n * 4);
      } else {
        ConvertFromFloat(base.data(), reinterpret_cast<uint16_t*>(g0.data()), grad_dtype, n);
      }
      std::vector<float> p = testing::RandomNormal(n, 1), zeros(n, 0.0f);
      std::vector<float> cpu_p = p, cpu_m = zeros, cpu_v = zeros, cpu_vmax = zeros;
      std::vector<uint16_t> cpu_out(n), gpu_out(n);
      float *dp, *dm, *dv, *dvmax;
      void *dg0, *dg, *dout;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dp), n * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dm), n * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dv), n * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dvmax), n * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dg0, n * gsize), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dg, n * gsize), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dout, n * 2), cudaSuccess);
      cudaMemcpy(dp, p.data(), n * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dg0, g0.data(), n * gsize, cudaMemcpyHostToDevice);
      for (float* d : {dm, dv, dvmax}) cudaMemcpy(d, zeros.data(), n * 4, cudaMemcpyHostToDevice);
      AdamOptions o;
      o.adamw = true, o.weight_decay = 0.01, o.amsgrad = amsgrad, o.grad_scale = 8.0;
      for (int64_t t = 1; t <= 200; ++t) {
        o.lr = 1e-3 * (1.0 + 0.1 * (t % 3));
        // g[i] = g0[(i + shift) % n]: the tail of g0 from `shift`, then its head.
        const int64_t shift = (t * kShift) % n, tail = n - shift;
        std::memcpy(g.data(), g0.data() + shift * gsize, tail * gsize);
        std::memcpy(g.data() + tail * gsize, g0.data(), shift * gsize);
        char* d0 = static_cast<char*>(dg0);
        char* d = static_cast<char*>(dg);
        ASSERT_EQ(cudaMemcpy(d, d0 + shift * gsize, tail * gsize, cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d + tail * gsize, d0, shift * gsize, cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        const void* host_g = g.data();
        std::vector<AdamShard> cpu, gpu;
        int64_t off = 0;
        for (int64_t s : sizes) {
          cpu.push_back({s, cpu_p.data() + off, static_cast<const char*>(host_g) + off * gsize,
                         grad_dtype, cpu_m.data() + off, cpu_v.data() + off, cpu_vmax.data() + off,
                         cpu_out.data() + off, DType::kBFloat16});
          gpu.push_back({s, dp + off, static_cast<const char*>(dg) + off * gsize, grad_dtype,
                         dm + off, dv + off, dvmax + off, static_cast<uint16_t*>(dout) + off,
                         DType::kBFloat16});
          off += s;
        }
        ASSERT_TRUE(FusedAdamStep(o, t, cpu).ok());
        ASSERT_TRUE(FusedAdamStepCuda(o, t, gpu).ok());
      }
      std::vector<float> gpu_p(n), gpu_m(n);
      ASSERT_EQ(cudaMemcpy(gpu_p.data(), dp, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(gpu_m.data(), dm, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(gpu_out.data(), dout, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(testing::AllClose(gpu_p.data(), cpu_p.data(), n));
      EXPECT_TRUE(testing::AllClose(gpu_m.data(), cpu_m.data(), n));
      int64_t copy_mismatch = 0;
      for (int64_t i = 0; i < n; ++i) copy_mismatch += gpu_out[i] != FloatToBFloat16(gpu_p[i]);
      EXPECT_EQ(copy_mismatch, 0) << "bf16 copy differs from the rounded fp32 params";
      for (void* d : {static_cast<void*>(dp), static_cast<void*>(dm), static_cast<void*>(dv),
                      static_cast<void*>(dvmax), dg0, dg, dout}) {
        cudaFree(d);
      }
    }
  }
#endif
}

}  // namespace
}  // namespace zerotrain::optim
