// ShardOptimizer: the engine's optimizer extension point. An optimizer owns the state of one flat
// fp32 shard of master weights (the whole flat buffer at stage 0, this rank's 1/N at stages 1
// and 2) and steps it from gradient segments that each cover a contiguous run of the shard; it
// may write the updated values, converted, into `params_out` (the model's own parameters). The
// built-in implementations wrap optim/'s fused AdamW/Adam and SGD kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "optim/adam.h"
#include "optim/precision.h"
#include "optim/sgd.h"

namespace zerotrain::trainer {

struct ShardSegment {
  int64_t offset = 0;  // first element of the master shard this segment updates
  int64_t size = 0;
  const void* grads = nullptr;  // `size` gradients, not yet divided by grad_scale
  optim::DType grad_dtype = optim::DType::kFloat32;
  void* params_out = nullptr;   // optional: where the updated values go in the model's dtype
  optim::DType params_out_dtype = optim::DType::kFloat32;
};

class ShardOptimizer {
 public:
  virtual ~ShardOptimizer() = default;
  virtual std::string name() const = 0;
  // Called once, before the first step, with the number of master elements this rank steps.
  virtual absl::Status Init(int64_t shard_numel) = 0;
  // Optimizer step `step` (1, 2, ... counting only steps taken, not skipped ones). Gradients
  // are divided by `grad_scale` (loss scale times the clipping factor) before use.
  virtual absl::Status Step(int64_t step, double grad_scale, float* master,
                            absl::Span<const ShardSegment> segments) = 0;
  // Bytes of optimizer state held (moments, momentum buffers), for the memory accounting.
  virtual int64_t state_bytes() const = 0;
  virtual void set_lr(double lr) = 0;
  // The per-element state, after Init: named fp32 arrays of shard_numel elements each, aligned
  // with the master shard, that checkpoints save and re-slice (empty for stateless SGD). The
  // default, UNIMPLEMENTED, makes Engine::SaveCheckpoint refuse with the optimizer's name.
  virtual absl::StatusOr<std::vector<std::pair<std::string, float*>>> state();
};

std::unique_ptr<ShardOptimizer> MakeAdamShardOptimizer(const optim::AdamOptions& options);
std::unique_ptr<ShardOptimizer> MakeSgdShardOptimizer(const optim::SgdOptions& options);

}  // namespace zerotrain::trainer
