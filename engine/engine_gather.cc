// The Engine's parameter access: the forward scope stage 3 reads parameters in, and
// GatheredParameters (deepspeed.zero.GatheredParameters) for reading or changing chosen
// parameters outside forward, at any stage.
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/master_state.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

Engine::ForwardScope Engine::BeginForward() {
  store_->BeginForward();
  return ForwardScope(store_.get());
}

Engine::ForwardScope::~ForwardScope() {
  if (store_ != nullptr) store_->EndForward();
}

std::vector<int64_t> Engine::FullShape(const at::Tensor& param) const {
  auto it = param_index_.find(param.unsafeGetTensorImpl());
  if (it == param_index_.end()) return param.sizes().vec();
  return store_->FullShape(it->second);
}

absl::StatusOr<std::unique_ptr<Engine::GatheredParameters>> Engine::GatherParameters(
    const std::vector<at::Tensor>& params, int modifier_rank) {
  const std::string where = absl::StrCat("GatheredParameters on rank ", group_->rank(), ": ");
  if (modifier_rank < -1 || modifier_rank >= group_->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "modifier_rank ", modifier_rank,
                                                   " is not -1 or a rank below ",
                                                   group_->world_size()));
  }
  std::vector<int> indices;
  for (size_t k = 0; k < params.size(); ++k) {
    auto it = param_index_.find(params[k].unsafeGetTensorImpl());
    if (it == param_index_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "tensor #", k, " is not a trainable parameter of the engine's module"));
    }
    indices.push_back(it->second);
  }
  absl::Status pinned = store_->Pin(indices);
  if (!pinned.ok()) return WithPrefix(pinned, where);
  return std::unique_ptr<GatheredParameters>(
      new GatheredParameters(this, std::move(indices), modifier_rank));
}

absl::Status Engine::GatheredParameters::Close() {
  if (!open_) return absl::OkStatus();
  open_ = false;
  return engine_->CloseGathered(params_, modifier_rank_);
}

Engine::GatheredParameters::~GatheredParameters() {
  absl::Status s = Close();
  if (!s.ok()) std::fprintf(stderr, "zerotrain: %s\n", std::string(s.message()).c_str());
}

absl::Status Engine::CloseGathered(const std::vector<int>& params, int modifier_rank) {
  const std::string where = absl::StrCat("GatheredParameters on rank ", group_->rank(), ": ");
  absl::Status status;
  if (modifier_rank >= 0) {
    // Every rank joins every broadcast even after a local failure (a write to NVMe), and the
    // ranks then agree: one that kept the old values would silently train on others' new ones.
    absl::Status local;
    for (int i : params) {
      try {
        c10::NoGradGuard no_grad;
        partition::SkipGatherOnUse skip;  // pinned, so resident: the raw tensors are read here
        at::Tensor p = flat_params().params()[i].second.detach();
        at::Tensor flat = p.contiguous().view({-1});
        const absl::Status sent = group_->Broadcast(flat, modifier_rank);
        if (!sent.ok()) {
          status = sent;  // the group is unusable now; no agreement can follow
          break;
        }
        if (!local.ok()) continue;
        if (!p.is_contiguous()) p.copy_(flat.view(p.sizes()));
        local = store_->WriteBack(i);
        if (local.ok() && !master_->aliases_params()) {
          local = master_->FromValues(store_->MasterRunsOf(i), flat.to(at::kFloat));
        }
      } catch (const c10::Error& e) {
        if (local.ok()) local = absl::InternalError(e.what_without_backtrace());
      }
    }
    if (status.ok()) {
      status = AgreeAllOk(local, "");
      if (!status.ok()) broken_ = WithPrefix(status, where);
    }
  }
  store_->Unpin(params);
  if (!status.ok()) return WithPrefix(status, where);
  return absl::OkStatus();
}

}  // namespace zerotrain::engine
