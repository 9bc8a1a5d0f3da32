// MasterState: this rank's fp32 master weights and optimizer states, one object: the
// SubGroupStore that holds them where offload_optimizer puts them (the model's device, host
// memory or NVMe), the ShardOptimizer that steps them a sub-group at a time, and the StepStaging
// that brings the gradients to the state's device and the new parameters back. The Engine keeps
// the order of a step; this keeps the state and how it is reached.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "engine/device_runtime.h"
#include "engine/engine_options.h"
#include "engine/model_state.h"
#include "engine/param_store.h"
#include "engine/shard_optimizer.h"
#include "engine/step_staging.h"
#include "offload/pinned_host_pool.h"
#include "offload/sub_group_store.h"
#include "offload/swap_space.h"
#include "offload/transfer_stream.h"

namespace zerotrain::engine {

struct MasterStateInputs {
  const EngineOptions* options = nullptr;
  comm::ProcessGroup* group = nullptr;
  ParamStore* params = nullptr;  // the model's copy: its runs fill the master, its pieces step
  offload::PinnedHostPool* pool = nullptr;
  offload::TransferStream* transfer = nullptr;
  offload::SwapSpace* swap = nullptr;  // offload_optimizer nvme
  bool grads_in_store = false;         // the reducer's gradients go to the store (its sink)
  comm::HostDeviceCopies* copies = nullptr;
  const DeviceRuntime* device = nullptr;  // the engine's (the model's device)
  // Each parameter's group (engine order) for an optimizer with param_groups() > 1; empty: all 0.
  std::vector<int> param_groups;
};

class MasterState {
 public:
  // Builds the store and fills the master from the model (every element written: padding as
  // zeros, the states as `optimizer` says). Not collective.
  static absl::StatusOr<std::unique_ptr<MasterState>> Create(
      const MasterStateInputs& in, std::unique_ptr<ShardOptimizer> optimizer);

  int64_t numel() const { return numel_; }
  // The model's copy is one fp32 tensor laid out as the master, and nothing is offloaded: the
  // master is the model's own parameters.
  bool aliases_params() const { return aliases_params_; }
  ShardOptimizer& optimizer() const { return *optimizer_; }
  StepStaging& staging() const { return *staging_; }
  offload::SubGroupStore& store() const { return *store_; }
  // Sub-group memory of the state as a tensor on the device it lives on.
  at::Tensor Array(float* data, int64_t numel) const;

  // A host copy of the master weights (read from NVMe when offloaded there).
  absl::StatusOr<at::Tensor> Copy() const;
  // `values` (a parameter's full values, flat, fp32) into this rank's `runs` of the master.
  absl::Status FromValues(const std::vector<MasterRun>& runs, const at::Tensor& values);
  // Every sub-group, with its gradients where the store keeps them.
  absl::Status VisitWithGrads(const std::function<absl::Status(const offload::SubGroupView&)>& fn);
  // The optimizer's step `step` over every sub-group (master_state_step.cc); collective when the
  // optimizer asks for tensor sums.
  absl::Status Step(int64_t step, double grad_scale, const std::vector<ShardSegment>& segments);
  // The master's and the states' bytes, where they live.
  void AddBytes(ModelStateBytes* b) const;

 private:
  MasterState() = default;
  // The arrays on the model's device, which the store only cuts into sub-groups (no offload).
  absl::Status AllocateResident(const std::vector<float>& initial,
                                offload::SubGroupStoreOptions* so);
  absl::Status Fill(const std::vector<float>& initial);

  const EngineOptions* options_ = nullptr;
  comm::ProcessGroup* group_ = nullptr;
  ParamStore* params_ = nullptr;
  bool grads_in_store_ = false;
  std::vector<int> param_groups_;
  comm::HostDeviceCopies* copies_ = nullptr;  // the engine's count of host<->device bytes
  int64_t numel_ = 0;
  bool aliases_params_ = false;
  // Where the state lives: the model's device, or the host under offload_optimizer.
  const DeviceRuntime* runtime_ = &DeviceRuntime::Host();
  std::unique_ptr<ShardOptimizer> optimizer_;
  std::unique_ptr<StepStaging> staging_;
  std::vector<at::Tensor> resident_;  // without offload: the arrays store_ cuts up
  // The fp32 master weights, then the optimizer's state arrays, of numel_ elements each.
  std::unique_ptr<offload::SubGroupStore> store_;
};

}  // namespace zerotrain::engine
