// Engine::Step: the accumulation boundary's overflow agreement, global-norm clipping, the
// optimizer step on this rank's fp32 shard and the store's publication of the update (stages 1
// and 2 all-gather; stage 3 gathers on use, and only its persistent parameters here).
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/grad_stats.h"
#include "engine/master_state.h"
#include "engine/muon_gradients.h"
#include "engine/optim_dtype.h"
#include "engine/step_staging.h"
#include "engine/store_grad_sink.h"
#include "engine/tensor_memory.h"
#include "optim/clip_grad.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::Status Engine::WaitStreamOrdered(const std::string& where) const {
  absl::Status s = reducer_->WaitStreamOrdered();
  absl::Status published = store_->WaitStreamOrdered();
  if (s.ok()) s = published;
  return WithPrefix(s, where);
}

absl::StatusOr<GradStats> Engine::AgreeGradStats(const std::vector<partition::GradSegment>& grads) {
  GradStatsRequest request;
  request.overflow = scaler_ != nullptr || options_.check_grad_overflow;
  // With the statistics read anyway, the norm costs one more reduction and gives grad_norm.
  request.sum_of_squares = options_.gradient_clipping > 0 || request.overflow;
  GradStats out;
  // Nothing to learn (fp32/bf16 with the check off, no clipping): the host only checks the
  // reductions.
  if (!request.overflow && !request.sum_of_squares) {
    ZT_RETURN_IF_ERROR(WaitStreamOrdered(""));
    return out;
  }
  at::Tensor stats;
  if (reducer_->sinks_grads()) {
    // Summed as the gradients went to the store; a copy, since the all-reduce writes into it.
    stats = grad_sink_->stats().clone();
  } else {
    std::vector<at::Tensor> tensors;
    for (const auto& g : grads) tensors.push_back(g.grads);
    ZT_ASSIGN_OR_RETURN(stats, runtime_->GradStats(tensors, request));
  }
  // One collective for both: a rank that saw inf/NaN must make every rank skip, or their weights
  // diverge; disjoint gradient shards add up their squares, whole (identical) ones take the max.
  if (request.overflow || store_->grads_sharded()) {
    ZT_RETURN_IF_ERROR(group_->AllReduce(
        stats, store_->grads_sharded() ? comm::ReduceOp::kSum : comm::ReduceOp::kMax));
  }
  ZT_RETURN_IF_ERROR(WaitStreamOrdered(""));
  // The step's one host read of device results.
  const at::Tensor host = stats.cpu();
  host_copies_.Count(stats, host);
  out.overflow = host.data_ptr<double>()[0] > 0;
  out.sum_of_squares = host.data_ptr<double>()[1];
  return out;
}

absl::Status Engine::StageAndStep(const std::vector<partition::GradSegment>& grads,
                                  double grad_scale) {
  // The gradients where the optimizer state lives (offload_optimizer from a GPU: pinned host
  // copies, all started before the first is waited for), and the low-precision copy the optimizer
  // writes where the store keeps it in place (the flat buffer; a store that hands it out per piece,
  // stage 3's shard, does so in MasterState::Step).
  std::vector<ShardSegment> segments;
  auto stage = [&]() -> absl::Status {
    for (const auto& g : grads) {
      ShardSegment s;
      s.offset = g.shard_offset;
      s.size = g.numel;
      // Gradients the store keeps (fp32) are pointed at per sub-group in MasterState::Step.
      if (g.grads.defined()) {
        ZT_ASSIGN_OR_RETURN(const at::Tensor staged, master_->staging().In(g.grads));
        s.grads = staged.data_ptr();
        s.grad_dtype = ToOptimDtype(g.grads.scalar_type());
      }
      const at::Tensor out = master_->aliases_params() ? at::Tensor() : store_->ParamsOut(g);
      if (out.defined()) {
        ZT_ASSIGN_OR_RETURN(const at::Tensor written, master_->staging().Out(out));
        s.params_out = written.data_ptr();
        s.params_out_dtype = ToOptimDtype(out.scalar_type());
      }
      segments.push_back(s);
    }
    return master_->staging().WaitInputs();
  };
  const absl::Status staged = stage();
  // An optimizer with tensor sums meets the other ranks inside MasterState::Step: a rank whose
  // copies failed must not skip that meeting alone.
  if (master_->optimizer().tensor_sums() > 0) {
    ZT_RETURN_IF_ERROR(AgreeAllOk(staged, ""));
  } else {
    ZT_RETURN_IF_ERROR(staged);
  }
  ZT_RETURN_IF_ERROR(master_->Step(optimizer_steps_ + 1, grad_scale, segments));
  return master_->staging().Publish();
}

double Engine::next_lr() const {
  return schedule_ != nullptr ? schedule_->ForStep(optimizer_steps_).lr : lr_;
}

absl::Status Engine::StepAtBoundary() {
  c10::NoGradGuard no_grad;
  if (schedule_ != nullptr) {
    // DeepSpeed steps its scheduler after each optimizer step it takes: this step runs with the
    // values for the steps taken so far, and a skipped one leaves them where they were.
    const optim::StepHyperparams h = schedule_->ForStep(optimizer_steps_);
    set_lr(h.lr);
    if (h.betas) ZT_RETURN_IF_ERROR(set_betas(h.betas->first, h.betas->second));
  }
  const std::vector<partition::GradSegment> grads = reducer_->OwnedGrads();
  // Muon's gradients become its updates before the norm (DeepSpeed's ZeRO clips those), or after
  // it, from the clipped gradients (its stage 0).
  const bool muon_after_clip = options_.muon.orthogonalize_clipped;
  if (muon_ != nullptr && !muon_after_clip) {
    ZT_RETURN_IF_ERROR(WaitStreamOrdered(""));
    ZT_RETURN_IF_ERROR(AgreeAllOk(muon_->Apply(grads, 1.0, loss_scale()), ""));
  }
  ZT_ASSIGN_OR_RETURN(GradStats stats, AgreeGradStats(grads));
  // A non-finite norm cannot clip either: with clipping on the step is skipped even where the
  // check is off (bf16 with check_grad_overflow false), as DeepSpeed's stage 3 skips it.
  if (stats.overflow || (options_.gradient_clipping > 0 && !std::isfinite(stats.sum_of_squares))) {
    ++skipped_steps_;
    last_grad_norm_ = std::numeric_limits<double>::infinity();
    clock_->Lap(StepPhase::kStep);
    return scaler_ ? scaler_->Update(true) : absl::OkStatus();
  }
  double grad_scale = loss_scale();
  const double norm = std::sqrt(stats.sum_of_squares);
  last_grad_norm_ = norm / grad_scale;
  if (options_.gradient_clipping > 0) {
    ZT_ASSIGN_OR_RETURN(grad_scale,
                        optim::CombinedGradScale(grad_scale, norm, options_.gradient_clipping));
  }
  if (muon_ != nullptr && muon_after_clip) {
    ZT_RETURN_IF_ERROR(AgreeAllOk(muon_->Apply(grads, grad_scale, grad_scale), ""));
  }
  // A rank whose optimizer failed (a swap-in from NVMe, a kernel, a copy) would not join the
  // all-gather below, and its weights now differ from the others': every rank learns of it here.
  ZT_RETURN_IF_ERROR(AgreeAllOk(StageAndStep(grads, grad_scale), ""));
  ++optimizer_steps_;
  if (scaler_) ZT_RETURN_IF_ERROR(scaler_->Update(false));
  clock_->Lap(StepPhase::kStep);
  // Stages 1/2 all-gather the updated slices; stage 3 refreshes its gathered copies.
  ZT_RETURN_IF_ERROR(store_->PublishUpdate(""));
  clock_->Lap(StepPhase::kAllgather);
  return absl::OkStatus();
}

absl::Status Engine::Step() {
  clock_->Lap(StepPhase::kUntimed);  // since Backward returned: the caller's
  if (!broken_.ok()) return BrokenError();
  if (!backward_pending_) {
    return absl::FailedPreconditionError(
        absl::StrCat("Step on rank ", group_->rank(), " (micro step ", micro_steps_,
                     "): no Backward() since the last Step(); call Backward(loss) first"));
  }
  backward_pending_ = false;
  ++micro_steps_;
  if (micro_steps_ % batch_.gradient_accumulation_steps != 0) {
    return absl::OkStatus();
  }
  absl::Status status;
  try {
    status = StepAtBoundary();
  } catch (const c10::Error& e) {
    status = absl::InternalError(e.what_without_backtrace());
  }
  reducer_->Zero();
  // What the last steps freed and this one did not take again goes back to the system; what this
  // step freed (its activations, gathers, buckets) stays mapped for the next, which takes it.
  ReturnIdleHostMemory();
  clock_->EndStep();
  if (!status.ok()) {
    // Ranks may have stepped different shards, or some gathered and others not.
    broken_ = absl::Status(status.code(),
                           absl::StrCat("Step on rank ", group_->rank(), " (optimizer step ",
                                        optimizer_steps_ + 1, "): ", status.message()));
    return broken_;
  }
  return absl::OkStatus();
}

absl::Status Engine::BrokenError() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", group_->rank(), ": the engine's state is inconsistent since an earlier failure (",
      broken_.message(), "); load a checkpoint (LoadCheckpoint) or build a new engine"));
}

}  // namespace zerotrain::engine
