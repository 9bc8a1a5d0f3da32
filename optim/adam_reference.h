// Test-only reference for Adam/AdamW: torch.optim's update written out element by element in
// double precision, sharing no code with the kernels it checks.
#pragma once

#include <cstdint>
#include <vector>

#include "optim/adam.h"

namespace zerotrain::optim::testing {

class ReferenceAdam {
 public:
  explicit ReferenceAdam(const std::vector<float>& init);

  // Step t (1-based) with `grads` still multiplied by options.grad_scale.
  void Step(const AdamOptions& options, int64_t t, const std::vector<float>& grads);

  // The state rounded to fp32, to compare with a kernel's buffers.
  static std::vector<float> F(const std::vector<double>& x) { return {x.begin(), x.end()}; }

  std::vector<double> p, m, v, vmax;
};

}  // namespace zerotrain::optim::testing
