// ResNetOptions: what builds a ResNet (resnet.h), and the checks and counts that need no module,
// in a header without LibTorch's module headers (as gpt_options.h).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "models/submodule_hook.h"

namespace zerotrain::models {

struct ResNetOptions {
  int64_t depth = 18;  // 18: basic blocks [2, 2, 2, 2]; 50: bottlenecks [3, 4, 6, 3]
  int64_t num_classes = 1000;
  // Recompute every k-th residual block (counted across the four stages) in backward; 0 = none.
  int64_t checkpoint_every = 0;
  bool cpu_checkpointing = false;
  // Each submodule (conv1, bn1, every residual block, fc) right after it is built: ZeRO stage 3's
  // partitioned construction, as for the language models.
  SubmoduleHook after_submodule;
};

absl::Status ValidateResNetOptions(const ResNetOptions& options);

// Trainable parameters: conv and linear weights, BatchNorm's weight and bias, fc's bias.
int64_t ResNetParameterCount(const ResNetOptions& options);

}  // namespace zerotrain::models
