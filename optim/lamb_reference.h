// Test-only reference for DeepSpeed's FusedLamb: the update of its CUDA kernel
// (csrc/lamb/fused_lamb_cuda_kernel.cu) written out element by element in double precision, one
// whole tensor at a time, sharing no code with the kernels it checks.
#pragma once

#include <cstdint>
#include <vector>

#include "optim/lamb.h"

namespace zerotrain::optim::testing {

class ReferenceLamb {
 public:
  // `init` holds the tensors one after another, tensor i of tensor_sizes[i] elements.
  ReferenceLamb(const std::vector<float>& init, std::vector<int64_t> tensor_sizes);

  // Step t (1-based) with `grads` (laid out as `init`) still multiplied by options.grad_scale.
  void Step(const LambOptions& options, int64_t t, const std::vector<float>& grads);

  std::vector<double> p, m, v;

 private:
  std::vector<int64_t> tensor_sizes_;
};

}  // namespace zerotrain::optim::testing
