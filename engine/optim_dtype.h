// ToOptimDtype: optim/'s name for a tensor's dtype. optim/ knows no LibTorch, so the engine
// translates where it hands tensors' memory to optim's kernels.
#pragma once

#include <c10/core/ScalarType.h>

#include "optim/precision.h"

namespace zerotrain::engine {

// fp32, bf16 or fp16; other dtypes read as fp32.
inline optim::DType ToOptimDtype(c10::ScalarType t) {
  switch (t) {
    case c10::kBFloat16:
      return optim::DType::kBFloat16;
    case c10::kHalf:
      return optim::DType::kFloat16;
    default:
      return optim::DType::kFloat32;
  }
}

}  // namespace zerotrain::engine
