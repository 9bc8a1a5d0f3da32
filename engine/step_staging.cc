// StepStaging: gradients to the optimizer state's device and new parameters back, through pool
// blocks whose reuse waits for the copies' fences.
#include "engine/step_staging.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "offload/memory_roles.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

StepStaging::StepStaging(const DeviceRuntime* state, offload::TransferStream* transfer,
                         offload::PinnedHostPool* pool, absl::Duration timeout,
                         comm::HostDeviceCopies* copies)
    : state_(state), transfer_(transfer), pool_(pool), timeout_(timeout), copies_(copies) {}

StepStaging::~StepStaging() {
  // A copy still running reads or writes its block: wait for it, and leak a block it outlived.
  for (std::vector<Staged>* list : {&inputs_, &outputs_, &retiring_}) {
    for (Staged& s : *list) {
      if (!s.fence.Wait(timeout_).ok()) new at::Tensor(s.buffer);
    }
  }
}

absl::StatusOr<at::Tensor> StepStaging::Buffer(const at::Tensor& like) {
  offload::MemoryRoleScope role(offload::MemoryRole::kStaging);
  // On the host, a block of the pool: page-locked when the engine asked for pinned memory, so
  // the copies run asynchronously.
  absl::StatusOr<at::Tensor> buffer = state_->Buffer(like, pool_);
  if (!buffer.ok()) {
    return absl::Status(buffer.status().code(),
                        absl::StrCat("a staging buffer of ", like.nbytes(), " bytes on ",
                                     state_->device().str(), ": ", buffer.status().message()));
  }
  return buffer;
}

absl::Status StepStaging::Retire() {
  absl::Status status;
  for (Staged& s : retiring_) {
    absl::Status w = s.fence.Wait(timeout_);
    if (!w.ok()) new at::Tensor(s.buffer);  // still in use by the copy: never reused
    status.Update(w);
  }
  retiring_.clear();
  return status;
}

absl::StatusOr<at::Tensor> StepStaging::In(const at::Tensor& t) {
  if (t.device() == state_->device()) return t;
  for (const Staged& s : inputs_) {
    if (s.target.is_same(t) || (s.target.data_ptr() == t.data_ptr() &&
                                s.target.numel() == t.numel() && s.target.dtype() == t.dtype())) {
      return s.buffer;
    }
  }
  ZT_RETURN_IF_ERROR(Retire());
  ZT_ASSIGN_OR_RETURN(at::Tensor buffer, Buffer(t));
  ZT_ASSIGN_OR_RETURN(offload::Fence fence, transfer_->Copy(buffer, t));
  copies_->Count(t, buffer);
  inputs_.push_back({t, buffer, fence});
  return buffer;
}

void StepStaging::StartIn(const at::Tensor& t) {
  absl::StatusOr<at::Tensor> started = In(t);
  if (!started.ok() && early_error_.ok()) early_error_ = started.status();
}

absl::Status StepStaging::Reset() {
  absl::Status status = WaitInputs();
  for (Staged& s : outputs_) retiring_.push_back(std::move(s));
  outputs_.clear();
  status.Update(Retire());
  return status;
}

absl::Status StepStaging::WaitInputs() {
  absl::Status status = early_error_;
  early_error_ = absl::OkStatus();
  for (Staged& s : inputs_) {
    status.Update(s.fence.Wait(timeout_));
    // Kept until the next Retire (the optimizer reads the buffer after this returns), with its
    // fence: a copy that outlived the wait may still write into it, and Retire then leaks it.
    retiring_.push_back({at::Tensor(), s.buffer, s.fence});
  }
  inputs_.clear();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("copying gradients to ", state_->device().str(),
                                                    " for the optimizer: ", status.message()));
  }
  return status;
}

absl::StatusOr<at::Tensor> StepStaging::Out(const at::Tensor& t) {
  if (t.device() == state_->device()) return t;
  ZT_ASSIGN_OR_RETURN(at::Tensor buffer, Buffer(t));
  // Zeros where the optimizer writes nothing (padding between parameters, which a per-tensor
  // optimizer skips), rather than what the block held before.
  buffer.zero_();
  outputs_.push_back({t, buffer, offload::Fence()});
  return buffer;
}

absl::Status StepStaging::Publish() {
  absl::Status status;
  for (Staged& s : outputs_) {
    absl::StatusOr<offload::Fence> f = transfer_->Copy(s.target, s.buffer);
    if (f.ok()) {
      s.fence = *f;
      copies_->Count(s.buffer, s.target);
      // Into host memory (a shard offload_param keeps there) the values must be there now; a
      // device's stream is ordered after the copy. A finished copy's buffer goes at once rather
      // than piling up until Reset.
      const absl::Status w = f->ReadyFor(s.target.device(), timeout_);
      status.Update(w);
      if (w.ok() && f->done()) {
        status.Update(f->Wait(timeout_));  // done: at once, with the copy's error if it failed
        continue;
      }
    }
    status.Update(f.status());
    retiring_.push_back(std::move(s));
  }
  outputs_.clear();
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("copying the optimizer's new parameters from ",
                                     state_->device().str(), ": ", status.message()));
  }
  return status;
}

}  // namespace zerotrain::engine
