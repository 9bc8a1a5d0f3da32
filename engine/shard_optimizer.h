// ShardOptimizer: the engine's optimizer extension point. An optimizer steps fp32 master weights
// from gradient segments; the master weights and the optimizer's per-element state arrays belong
// to the engine, which keeps them with the model, in host memory or on NVMe (offload_optimizer)
// and hands them over one sub-group at a time as a ShardState. So an optimizer holds no
// per-element memory of its own: it names its state arrays and updates what it is given. It may
// write the updated values, converted, into `params_out` (the model's own parameters). The
// built-in implementations wrap optim/'s fused AdamW/Adam, SGD, Adagrad and LAMB kernels.
//
// An update that depends on sums over a whole parameter tensor (LAMB's trust ratio needs |p| and
// |u| of each tensor) cannot be taken one sub-group at a time, since ZeRO cuts tensors across
// sub-groups and ranks. Such an optimizer asks for tensor_sums() > 0, and the engine then steps in
// two passes: AddTensorSums over every sub-group, the sums added up across the ranks, then Step
// over every sub-group with the totals.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/device_runtime.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/precision.h"
#include "optim/sgd.h"

namespace zerotrain::engine {

struct ShardSegment {
  int64_t offset = 0;  // shard element of the first value this segment updates
  int64_t size = 0;
  const void* grads = nullptr;  // `size` gradients, not yet divided by grad_scale
  optim::DType grad_dtype = optim::DType::kFloat32;
  void* params_out = nullptr;  // optional: where the updated values go in the model's dtype
  optim::DType params_out_dtype = optim::DType::kFloat32;
  // Only for an optimizer with param_groups() > 1, else 0: the group of the parameter the segment
  // lies in (the engine cuts segments at parameter boundaries for such an optimizer).
  int param_group = 0;
  // Only for an optimizer with tensor_sums() k > 0, else null: the segment lies inside one
  // parameter tensor, and this points at that tensor's k sums (host memory). AddTensorSums adds
  // the segment's part to them; in Step they are the totals over the whole tensor.
  double* tensor_sums = nullptr;
};

// Shard elements [begin, begin + numel) of the master weights and of each state array, in
// memory for the duration of one Step call; element `begin` is at index 0.
struct ShardState {
  // The runtime of the memory master, state, grads and params_out live in (its device());
  // the built-in optimizers take their kernels from it: optim's CPU kernels on the host, the
  // CUDA kernels on the current stream of a CUDA device.
  const DeviceRuntime* runtime = &DeviceRuntime::Host();
  int64_t begin = 0;
  int64_t numel = 0;
  float* master = nullptr;
  std::vector<float*> state;  // in state_names() order, initial_state() before the first step
};

class ShardOptimizer {
 public:
  virtual ~ShardOptimizer() = default;
  virtual std::string name() const = 0;
  // The fp32 arrays of one element per master weight the optimizer needs ("exp_avg", ...);
  // checkpoints save them under these names. Empty for a stateless optimizer.
  virtual std::vector<std::string> state_names() const = 0;
  // What each state array holds before the first step, in state_names() order (Adagrad's
  // initial_accumulator_value); zeros unless overridden.
  virtual std::vector<float> initial_state() const {
    return std::vector<float>(state_names().size(), 0.0f);
  }
  // Optimizer step `step` (1, 2, ... counting only steps taken, not skipped ones) for the
  // segments that fall in `shard` (each lies inside it). The engine calls it once per sub-group
  // with the same `step`. Gradients are divided by `grad_scale` (loss scale times the clipping
  // factor) before use.
  virtual absl::Status Step(int64_t step, double grad_scale, const ShardState& shard,
                            absl::Span<const ShardSegment> segments) = 0;
  // How many groups of parameters the optimizer treats apart (Muon's and Adam's); the engine
  // assigns each parameter to one (MasterStateInputs::param_groups).
  virtual int param_groups() const { return 1; }
  // Per state array (state_names() order): the one group whose parameters use it, or -1 for
  // every group. The engine keeps an array of one group only for that group's elements (Muon's
  // exp_avg_sq, Adam's alone), and the step sees zeros elsewhere and may write nothing there.
  virtual std::vector<int> state_array_groups() const {
    return std::vector<int>(state_names().size(), -1);
  }
  // How many sums per parameter tensor a step needs (see the top of this file); 0: none.
  virtual int tensor_sums() const { return 0; }
  // Pass 1 of a two-pass step, with the same arguments as Step: adds each segment's part of its
  // tensor's sums into segment.tensor_sums (params_out is null). It may update the state it is
  // given (kept for pass 2) but not the master.
  virtual absl::Status AddTensorSums(int64_t step, double grad_scale, const ShardState& shard,
                                     absl::Span<const ShardSegment> segments) {
    return absl::UnimplementedError(name() + " asks for no tensor sums");
  }
  virtual void set_lr(double lr) = 0;
  // Adam's or LAMB's betas, for a schedule that cycles momentum (OneCycle); an optimizer without
  // betas refuses, as DeepSpeed turns cycle_momentum off for one.
  virtual absl::Status set_betas(double beta1, double beta2) {
    return absl::FailedPreconditionError(name() + " has no betas to schedule");
  }
};

std::unique_ptr<ShardOptimizer> MakeAdamShardOptimizer(const optim::AdamOptions& options);
std::unique_ptr<ShardOptimizer> MakeSgdShardOptimizer(const optim::SgdOptions& options);
// torch.optim.Adagrad; its state "sum" starts at initial_accumulator_value.
std::unique_ptr<ShardOptimizer> MakeAdagradShardOptimizer(const optim::AdagradOptions& options,
                                                          double initial_accumulator_value);
// DeepSpeed's FusedLamb, with a trust ratio per parameter tensor (two passes).
std::unique_ptr<ShardOptimizer> MakeLambShardOptimizer(const optim::LambOptions& options);

// DeepSpeed's MuonWithAuxAdam, the step's half: parameter group 1's segments carry Muon updates
// in place of gradients (engine/muon_gradients.h wrote them), applied as
// p <- p (1 - lr wd) - lr u; group 0 is Adam(W) with `adam`. Its state arrays are Adam's
// "exp_avg" and "exp_avg_sq"; for a Muon parameter the first is its momentum buffer and the
// second stays zero.
struct MuonStepOptions {
  double lr = 0.02;
  double weight_decay = 0.0;
  optim::AdamOptions adam;
};
std::unique_ptr<ShardOptimizer> MakeMuonShardOptimizer(const MuonStepOptions& options);

}  // namespace zerotrain::engine
