// The engine's fp32 master weights and optimizer states: where offload_optimizer keeps them (a
// SubGroupStore over arrays on the model's device, in host memory or on NVMe), how they are filled
// from the model, and read and written whole for checkpoints (engine_optimizer_step.cc steps them).
// Sub-group arrays are reached as tensors on state_device_ (StateArray), so the same code serves
// host and device memory.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "engine/engine.h"
#include "engine/step_staging.h"
#include "engine/store_grad_sink.h"
#include "offload/memory_roles.h"
#include "offload/pinned_host_pool.h"
#include "offload/sub_group_store.h"
#include "offload/swap_space.h"
#include "offload/transfer_stream.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::Status Engine::InitOffload() {
  const std::string where = absl::StrCat("Engine::Create on rank ", group_->rank(), ": ");
  const OptimizerOffloadOptions& off = options_.offload_optimizer;
  const ParamOffloadOptions& param = options_.offload_param;
  offload::PinnedHostPoolOptions po;
  // Page-locking speeds up copies between a device and host memory; a CPU engine makes none, so
  // pin_memory (on by default, as in DeepSpeed) costs it nothing and asks for nothing.
  po.use_cuda_host_alloc =
      !options_.device.is_cpu() && ((off.device != OffloadDevice::kNone && off.pin_memory) ||
                                    (param.device != OffloadDevice::kNone && param.pin_memory));
  ZT_ASSIGN_OR_RETURN(offload::PinnedHostPool pool, offload::PinnedHostPool::Create(po));
  host_pool_ = std::make_unique<offload::PinnedHostPool>(std::move(pool));
  auto transfer = offload::MakeTransferStream(options_.device);
  if (!transfer.ok()) return WithPrefix(transfer.status(), where);
  transfer_ = std::move(*transfer);
  auto make_swap = [&](const std::string& path, const offload::AioOptions& aio, const char* field,
                       std::unique_ptr<offload::SwapSpace>* out) {
    offload::SwapSpaceOptions sw;
    sw.directory = path;
    sw.aio = aio;
    auto swap = offload::SwapSpace::Create(sw);
    if (!swap.ok()) {
      return WithPrefix(swap.status(), absl::StrCat(where, field, " \"", path, "\": "));
    }
    *out = std::move(*swap);
    return absl::OkStatus();
  };
  if (off.device == OffloadDevice::kNvme) {
    ZT_RETURN_IF_ERROR(make_swap(off.nvme_path, off.aio, "offload_optimizer.nvme_path", &swap_));
  }
  if (param.device == OffloadDevice::kNvme) {
    ZT_RETURN_IF_ERROR(
        make_swap(param.nvme_path, param.aio, "offload_param.nvme_path", &param_swap_));
  }
  return absl::OkStatus();
}

partition::ParamShardOptions Engine::ParamShardOptionsFor() const {
  const ParamOffloadOptions& param = options_.offload_param;
  partition::ParamShardOptions o;
  o.pool = host_pool_.get();
  o.transfer = transfer_.get();
  if (param.device == OffloadDevice::kCpu) o.device = partition::ParamDevice::kHost;
  if (param.device == OffloadDevice::kNvme) {
    o.device = partition::ParamDevice::kNvme;
    o.swap = param_swap_.get();
    o.region_prefix = absl::StrCat("rank", group_->rank(), ".param.");
    o.max_in_cpu = param.max_in_cpu;
  }
  return o;
}

absl::Status Engine::InitState() {
  const std::string where = absl::StrCat("Engine::Create on rank ", group_->rank(), ": ");
  const OptimizerOffloadOptions& off = options_.offload_optimizer;
  master_numel_ = store_->master_numel();
  const std::vector<ModelRun> runs = store_->ModelRuns();
  master_aliases_params_ = off.device == OffloadDevice::kNone && store_->ModelCanBeMaster();

  offload::SubGroupStoreOptions so;
  so.arrays = {checkpoint::kMasterArray};
  for (const std::string& n : optimizer_->state_names()) so.arrays.push_back(n);
  // What each array starts from: the master is filled below, the states as the optimizer says.
  std::vector<float> initial = {0.0f};
  for (float v : optimizer_->initial_state()) initial.push_back(v);
  if (initial.size() != so.arrays.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, optimizer_->name(), " gives ",
                                                   initial.size() - 1, " initial states for ",
                                                   so.arrays.size() - 1, " state arrays"));
  }
  so.numel = master_numel_;
  so.sub_group_numel = std::min(options_.sub_group_size, so.numel);
  so.pool = host_pool_.get();
  // Without offload the arrays live with the model, on its device: the engine allocates them (the
  // master may be the parameters themselves) and the store only cuts them into sub-groups.
  state_device_ = off.device == OffloadDevice::kNone ? options_.device : at::Device(at::kCPU);
  // A copy is waited for as long as a collective would be.
  staging_ =
      std::make_unique<StepStaging>(state_device_, transfer_.get(), host_pool_.get(),
                                    absl::FromChrono(group_->options().timeout), &host_copies_);
  offload::MemoryRoleScope role(offload::MemoryRole::kOptimizerStates);
  if (off.device == OffloadDevice::kNone) {
    try {
      for (size_t a = 0; a < so.arrays.size(); ++a) {
        if (a == 0 && master_aliases_params_) {
          ZT_ASSIGN_OR_RETURN(at::Tensor whole, store_->ModelRange(0, master_numel_));
          resident_state_.push_back(whole);
        } else {
          resident_state_.push_back(at::full({master_numel_}, initial[a],
                                             at::TensorOptions(at::kFloat).device(state_device_)));
        }
        so.external.push_back(resident_state_.back().data_ptr<float>());
      }
    } catch (const c10::Error& e) {
      return absl::ResourceExhaustedError(absl::StrCat(
          where, "allocating the fp32 master and optimizer states (", so.arrays.size(), " x ",
          master_numel_, " floats) on ", state_device_.str(), ": ", e.what_without_backtrace()));
    }
  }
  if (off.device == OffloadDevice::kNvme) {
    so.device = offload::StoreDevice::kNvme;
    so.swap = swap_.get();
    so.region_prefix = absl::StrCat("rank", group_->rank(), ".");
    so.buffer_count = off.buffer_count;
    so.grads = reducer_->sinks_grads();
  }
  auto store = offload::SubGroupStore::Create(so);
  if (!store.ok()) return WithPrefix(store.status(), where);
  state_ = std::move(*store);
  if (grad_sink_ != nullptr) grad_sink_->Attach(state_.get());
  if (master_aliases_params_) return absl::OkStatus();
  // Every element is written: padding as zeros, states as initial, the master from the model.
  c10::NoGradGuard no_grad;
  return WithPrefix(
      state_->VisitAll(offload::Access::kWrite,
                       [&](const offload::SubGroupView& v) -> absl::Status {
                         for (size_t a = 0; a < v.arrays.size(); ++a) {
                           StateArray(v.arrays[a], v.numel).fill_(initial[a]);
                         }
                         at::Tensor m = StateArray(v.arrays[0], v.numel);
                         for (const ModelRun& r : runs) {
                           const int64_t lo = std::max(r.master_offset, v.begin);
                           const int64_t hi =
                               std::min(r.master_offset + r.numel, v.begin + v.numel);
                           if (lo >= hi) continue;
                           ZT_ASSIGN_OR_RETURN(
                               at::Tensor model,
                               store_->ModelRange(r.model_offset + lo - r.master_offset, hi - lo));
                           m.narrow(0, lo - v.begin, hi - lo).copy_(model);
                         }
                         return absl::OkStatus();
                       }),
      where);
}

at::Tensor Engine::StateArray(float* data, int64_t numel) const {
  return at::from_blob(data, {numel}, at::TensorOptions(at::kFloat).device(state_device_));
}

absl::StatusOr<at::Tensor> Engine::MasterCopy() const {
  ZT_RETURN_IF_ERROR(WaitStreamOrdered("MasterCopy"));
  offload::MemoryRoleScope role(offload::MemoryRole::kOptimizerStates);
  at::Tensor out = at::empty({master_numel_}, at::kFloat);
  ZT_RETURN_IF_ERROR(state_->VisitAll(offload::Access::kRead, [&](const offload::SubGroupView& v) {
    const at::Tensor from = StateArray(v.arrays[0], v.numel);
    out.narrow(0, v.begin, v.numel).copy_(from);
    host_copies_.Count(from, out);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status Engine::MasterFromValues(int i, const at::Tensor& values) {
  for (const MasterRun& run : store_->MasterRunsOf(i)) {
    // Here model_offset is the offset into `values`.
    const ModelRun r{run.master_offset, run.param_offset, run.numel};
    ZT_RETURN_IF_ERROR(state_->Visit(
        r.master_offset, r.master_offset + r.numel, offload::Access::kReadWrite,
        [&](const offload::SubGroupView& v) {
          const int64_t lo = std::max(r.master_offset, v.begin);
          const int64_t hi = std::min(r.master_offset + r.numel, v.begin + v.numel);
          StateArray(v.arrays[0] + (lo - v.begin), hi - lo)
              .copy_(values.narrow(0, r.model_offset + (lo - r.master_offset), hi - lo));
          return absl::OkStatus();
        }));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::engine
