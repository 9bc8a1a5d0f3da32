// MasterState (master_state.h): where offload_optimizer keeps the master and the states (arrays on
// the model's device, or a SubGroupStore in host memory or on NVMe), in which dtype, how they are
// widened to fp32 for a visit, filled from the model, copied out and written from a parameter's
// values; master_state_step.cc steps them. Arrays are reached as tensors on the state runtime's
// device (Array), so the same code serves host and device memory.
#include "engine/master_state.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "offload/memory_roles.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::StatusOr<std::unique_ptr<MasterState>> MasterState::Create(
    const MasterStateInputs& in, std::unique_ptr<ShardOptimizer> optimizer) {
  const EngineOptions& options = *in.options;
  const OptimizerOffloadOptions& off = options.offload_optimizer;
  std::unique_ptr<MasterState> m(new MasterState());
  m->options_ = in.options;
  m->group_ = in.group;
  m->params_ = in.params;
  m->grads_in_store_ = in.grads_in_store;
  m->param_groups_ = in.param_groups;
  m->copies_ = in.copies;
  m->optimizer_ = std::move(optimizer);
  m->numel_ = in.params->master_numel();
  const c10::ScalarType master_dtype = options.bf16_master_weights ? at::kBFloat16 : at::kFloat;
  const c10::ScalarType state_dtype = options.bf16_optimizer_states ? at::kBFloat16 : at::kFloat;
  m->aliases_params_ =
      off.device == OffloadDevice::kNone && in.params->ModelCanBeMaster(master_dtype);

  // What each array starts from: the master is filled below, the states as the optimizer says.
  std::vector<std::string> names = {checkpoint::kMasterArray};
  for (const std::string& n : m->optimizer_->state_names()) names.push_back(n);
  std::vector<float> initial = {0.0f};
  for (float v : m->optimizer_->initial_state()) initial.push_back(v);
  std::vector<int> groups = {-1};
  for (int g : m->optimizer_->state_array_groups())
    groups.push_back(in.param_groups.empty() ? -1 : g);
  if (initial.size() != names.size() || groups.size() != names.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(m->optimizer_->name(), " gives ", initial.size() - 1, " initial states and ",
                     groups.size() - 1, " state groups for ", names.size() - 1, " state arrays"));
  }
  // The store holds every array but those kept for one group's elements (MakeCompact).
  offload::SubGroupStoreOptions so;
  std::vector<float> store_initial;
  for (size_t a = 0; a < names.size(); ++a) {
    m->dtypes_.push_back(a == 0 ? master_dtype : state_dtype);
    m->store_index_.push_back(groups[a] >= 0 ? -1 : static_cast<int>(so.arrays.size()));
    if (groups[a] >= 0) continue;
    so.arrays.push_back(names[a]);
    so.element_bytes.push_back(c10::elementSize(m->dtypes_[a]));
    store_initial.push_back(initial[a]);
  }
  so.numel = m->numel_;
  so.sub_group_numel = std::min(options.sub_group_size, so.numel);
  so.pool = in.pool;
  // Without offload the arrays live with the model, on its device.
  m->runtime_ = off.device == OffloadDevice::kNone ? in.device : &DeviceRuntime::Host();
  // A copy is waited for as long as a collective would be.
  m->staging_ = std::make_unique<StepStaging>(
      m->runtime_, in.transfer, in.pool, absl::FromChrono(in.group->options().timeout), in.copies);
  offload::MemoryRoleScope role(offload::MemoryRole::kOptimizerStates);
  for (size_t a = 0; a < names.size(); ++a) {
    const bool widen = m->dtypes_[a] != at::kFloat || m->store_index_[a] < 0;
    m->widened_.push_back(
        !widen ? at::Tensor()
               : at::empty({std::min(kPieceNumel, so.sub_group_numel)},
                           at::TensorOptions(at::kFloat).device(m->runtime_->device())));
  }
  ZT_RETURN_IF_ERROR(m->MakeCompact(in, initial));
  if (off.device == OffloadDevice::kNone) {
    ZT_RETURN_IF_ERROR(m->AllocateResident(store_initial, &so));
  }
  if (off.device == OffloadDevice::kNvme) {
    so.device = offload::StoreDevice::kNvme;
    so.swap = in.swap;
    so.region_prefix = absl::StrCat("rank", in.group->rank(), ".");
    so.buffer_count = off.buffer_count;
    so.grads = in.grads_in_store;
  }
  ZT_ASSIGN_OR_RETURN(m->store_, offload::SubGroupStore::Create(so));
  if (m->aliases_params_) return m;
  ZT_RETURN_IF_ERROR(m->Fill(initial));
  return m;
}

absl::Status MasterState::AllocateResident(const std::vector<float>& initial,
                                           offload::SubGroupStoreOptions* so) {
  try {
    for (size_t a = 0; a < so->arrays.size(); ++a) {
      const c10::ScalarType dtype = so->element_bytes[a] == 2 ? at::kBFloat16 : at::kFloat;
      if (a == 0 && aliases_params_) {
        ZT_ASSIGN_OR_RETURN(at::Tensor whole, params_->ModelRange(0, numel_));
        resident_.push_back(whole);
      } else {
        resident_.push_back(
            at::full({numel_}, initial[a], at::TensorOptions(dtype).device(runtime_->device())));
      }
      so->external.push_back(resident_.back().data_ptr());
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allocating the master and optimizer states (", so->arrays.size(), " x ", numel_,
        " elements) on ", runtime_->device().str(), ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

// Every element is written: padding as zeros, states as initial, the master from the model.
absl::Status MasterState::Fill(const std::vector<float>& initial) {
  const std::vector<ModelRun> runs = params_->ModelRuns();
  c10::NoGradGuard no_grad;
  return VisitAll(offload::Access::kWrite, [&](const MasterView& v) -> absl::Status {
    for (size_t a = 0; a < v.arrays.size(); ++a) Array(v.arrays[a], v.numel).fill_(initial[a]);
    at::Tensor m = Array(v.arrays[0], v.numel);
    for (const ModelRun& r : runs) {
      const int64_t lo = std::max(r.master_offset, v.begin);
      const int64_t hi = std::min(r.master_offset + r.numel, v.begin + v.numel);
      if (lo >= hi) continue;
      ZT_ASSIGN_OR_RETURN(at::Tensor model,
                          params_->ModelRange(r.model_offset + lo - r.master_offset, hi - lo));
      m.narrow(0, lo - v.begin, hi - lo).copy_(model);
    }
    return absl::OkStatus();
  });
}

at::Tensor MasterState::Array(float* data, int64_t numel) const {
  return at::from_blob(data, {numel}, at::TensorOptions(at::kFloat).device(runtime_->device()));
}

absl::StatusOr<at::Tensor> MasterState::Copy() const {
  offload::MemoryRoleScope role(offload::MemoryRole::kOptimizerStates);
  at::Tensor out = at::empty({numel_}, at::kFloat);
  ZT_RETURN_IF_ERROR(VisitAll(offload::Access::kRead, [&](const MasterView& v) {
    const at::Tensor from = Array(v.arrays[0], v.numel);
    out.narrow(0, v.begin, v.numel).copy_(from);
    copies_->Count(from, out);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status MasterState::FromValues(const std::vector<MasterRun>& runs, const at::Tensor& values) {
  for (const MasterRun& run : runs) {
    // Here model_offset is the offset into `values`.
    const ModelRun r{run.master_offset, run.param_offset, run.numel};
    ZT_RETURN_IF_ERROR(
        Visit(r.master_offset, r.master_offset + r.numel, offload::Access::kReadWrite,
              [&](const MasterView& v) {
                const int64_t lo = std::max(r.master_offset, v.begin);
                const int64_t hi = std::min(r.master_offset + r.numel, v.begin + v.numel);
                Array(v.arrays[0] + (lo - v.begin), hi - lo)
                    .copy_(values.narrow(0, r.model_offset + (lo - r.master_offset), hi - lo));
                return absl::OkStatus();
              }));
  }
  return absl::OkStatus();
}

void MasterState::AddBytes(ModelStateBytes* b) const {
  const auto array_bytes = [&](int a) {
    return store_index_[a] >= 0
               ? numel_ * store_->element_bytes(store_index_[a])
               : compact_[a].numel() * static_cast<int64_t>(compact_[a].element_size());
  };
  int64_t states = 0, compact = 0;
  for (int a = 1; a < num_arrays(); ++a) {
    states += array_bytes(a);
    if (store_index_[a] < 0) compact += array_bytes(a);
  }
  if (options_->offload_optimizer.device == OffloadDevice::kNone) {
    b->master = aliases_params_ ? 0 : array_bytes(0);
    b->optimizer_states = states;
  } else {
    // A compact array stays in host memory, whatever the store's device.
    b->offloaded_host += store_->host_bytes() + compact;
    b->offloaded_nvme += store_->nvme_bytes();
  }
}

}  // namespace zerotrain::engine
