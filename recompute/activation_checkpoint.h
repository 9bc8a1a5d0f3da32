// Activation recomputation for LibTorch: run a block without keeping its intermediate
// activations and run it again during backward (torch.utils.checkpoint's counterpart), restoring
// the CPU RNG state and that of every CUDA device an input lives on first, so dropout draws the
// same masks. Only the block's inputs are saved, in pinned host memory when cpu_checkpointing is
// set.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace zerotrain::recompute {

struct ActivationCheckpointOptions {
  bool cpu_checkpointing = false;  // keep the saved accelerator inputs in pinned host memory
  bool profile = false;            // time recomputation into RecomputeStats
};

using Block = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Returns block(inputs) computed without saving the block's activations; backward recomputes the
// block with grad enabled and backpropagates through the recomputed graph. Parameters the block
// captures receive gradients as if it had run normally. Tensors in `inputs` that do not require
// grad (token ids, masks) are saved as they are and get no gradient.
//  - The block must compute the same thing twice: same outputs in number, shapes and dtypes,
//    reading only `inputs`, its parameters and the RNGs of the CPU and of the devices its inputs
//    live on (a draw on another device is not replayed). It is copied and kept until backward,
//    so whatever it captures by reference must live that long.
//  - Changing an input in place between forward and backward makes backward fail (the same
//    version check autograd applies to saved tensors), except for accelerator inputs saved to
//    host memory by cpu_checkpointing, which are copies (asynchronous, into pinned memory, on
//    the input's current stream; the copies back wait for them).
//  - An exception the block throws during recomputation surfaces from backward()
//    (std::exception; autograd's own checks throw c10::Error) and leaves the RNG states as
//    they were.
//  - With grad mode off it just returns block(inputs).
// See docs/CHECKPOINT.md for how it composes with the Engine's gradient hooks.
std::vector<at::Tensor> CheckpointBlock(const Block& block, const std::vector<at::Tensor>& inputs,
                                        const ActivationCheckpointOptions& options = {});

// Convenience for the common one-tensor block.
at::Tensor CheckpointBlock(const std::function<at::Tensor(const at::Tensor&)>& block,
                           const at::Tensor& input,
                           const ActivationCheckpointOptions& options = {});

// Process-wide totals of recomputation, filled when options.profile is set.
struct RecomputeStats {
  int64_t recomputations = 0;
  double seconds = 0;
};
RecomputeStats GetRecomputeStats();
void ResetRecomputeStats();

}  // namespace zerotrain::recompute
