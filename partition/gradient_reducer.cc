// Bucketed gradient reduction for ZeRO stages 0-3 (see gradient_reducer.h): the hooks, the bucket
// order and the communication; the gradients' memory is grad_buffers.h's.
#include "partition/gradient_reducer.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "partition/grad_buffers.h"

namespace zerotrain::partition {

using comm::ReduceOp;

namespace {

// At most this many full-size buckets' worth of reductions are in flight (with their staging,
// output buffers and whatever the transport holds per operation) while the next bucket fills; the
// hook that would exceed it first waits for the oldest, as DeepSpeed's double-buffered buckets do.
// Without the bound stage 1 held every bucket's buffers at once and peaked above stage 0
// (engine_memory_test). Counted in elements, so that the small buckets of stage 3's per-submodule
// segments do not each become a point where backward waits.
constexpr int64_t kBucketsInFlight = 1;

// Runs right after autograd has accumulated a parameter's gradient into .grad: hands it to the
// reducer, which copies it out and drops .grad, so the parameters' gradients never all exist at
// once.
class TakeGradHook : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit TakeGradHook(std::function<void(const at::Tensor&)> take) : take_(std::move(take)) {}
  void operator()(const torch::autograd::Variable& param) override { take_(param); }

 private:
  std::function<void(const at::Tensor&)> take_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradientReducer>> GradientReducer::Create(comm::ProcessGroup* group,
                                                                         const FlatParams* params,
                                                                         ReducerOptions options) {
  if (params->layout().world_size() != group->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("GradientReducer: layout for ",
                                                   params->layout().world_size(),
                                                   " ranks, group has ", group->world_size()));
  }
  std::unique_ptr<GradientReducer> r(new GradientReducer(group, params, options));
  try {
    for (int i = 0; i < params->num_params(); ++i) {
      torch::autograd::impl::set_post_acc_grad_hooks(
          params->params()[i].second,
          std::make_unique<TakeGradHook>(
              [raw = r.get(), i](const at::Tensor& param) { raw->OnGrad(i, param); }));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("GradientReducer: gradient hook: ", e.what_without_backtrace()));
  }
  return r;
}

GradientReducer::GradientReducer(comm::ProcessGroup* group, const FlatParams* params,
                                 ReducerOptions options)
    : group_(group),
      params_(params),
      options_(options),
      scratch_(std::make_unique<ScratchBuffers>(params->options())) {
  const ShardLayout& layout = params->layout();
  bucket_param_count_.assign(layout.buckets().size(), 0);
  for (const LayoutBucket& b : layout.buckets())
    largest_bucket_ = std::max(largest_bucket_, b.numel);
  for (int i = 0; i < params->num_params(); ++i) {
    std::vector<int> buckets;
    for (const ParamPiece& piece : layout.PiecesOf(i)) {
      if (buckets.empty() || buckets.back() != piece.bucket) buckets.push_back(piece.bucket);
    }
    for (int b : buckets) ++bucket_param_count_[b];
    param_buckets_.push_back(std::move(buckets));
  }
  grads_ = GradBuffers::Create(params, group->rank(), options.keeping, options.grad_sink,
                               scratch_.get());
}

GradientReducer::~GradientReducer() {
  for (const auto& [name, p] : params_->params()) {
    try {
      torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
    } catch (const c10::Error&) {
      // The parameter's autograd meta is gone with it; nothing left to remove.
    }
  }
}

void GradientReducer::BeginBackward(bool reduce) {
  active_ = true;
  reduce_ = reduce || grads_->reduces_every_backward();
  boundary_ = reduce;
  arrived_.assign(params_->num_params(), false);
  waiting_ = bucket_param_count_;
  next_bucket_ = 0;
  hook_error_ = absl::OkStatus();
  grads_->BeginBackward();  // left over only after a failed backward
  scratch_->Clear();
  // A sink that cannot begin fails the backward, after its reductions (the other ranks wait).
  if (reduce_) pending_error_ = grads_->BeginPass();
}

void GradientReducer::OnGrad(int param, const at::Tensor& tensor) {
  // Outside the engine's Backward (a user's own backward), .grad stays as autograd left it.
  if (!active_ || !hook_error_.ok()) return;
  if (arrived_[param]) {
    // Autograd sums every use of a leaf before accumulating, so a second call means a reentrant
    // backward (e.g. the parameter is used in two checkpointed blocks): its bucket may already be
    // reducing, so the second piece cannot join it.
    hook_error_ = absl::FailedPreconditionError(absl::StrCat(
        "gradient of '", params_->name(param),
        "' arrived in more than one piece in one backward: a parameter used inside several "
        "activation-checkpointed blocks (or inside one and outside it) is not supported"));
    return;
  }
  try {
    c10::NoGradGuard no_grad;
    at::Tensor& slot = tensor.mutable_grad();
    if (!slot.defined()) return;
    at::Tensor g = slot.reshape({-1});
    slot = at::Tensor();
    grads_->Add(param, g);
  } catch (const c10::Error& e) {
    hook_error_ = absl::InternalError(absl::StrCat("gradient hook of '", params_->name(param),
                                                   "': ", e.what_without_backtrace()));
    return;
  }
  arrived_[param] = true;
  if (!reduce_) return;
  for (int b : param_buckets_[param]) --waiting_[b];
  LaunchReady();
  // Without overlap_comm a full bucket is still reduced at once, but waited for here, as
  // DeepSpeed does: deferring every bucket to the end of backward would stage them all, the
  // whole model's gradients at once at stage 2.
  if (!options_.overlap_comm) Drain(0);
}

void GradientReducer::LaunchReady() {
  const int nb = static_cast<int>(waiting_.size());
  while (next_bucket_ < nb && waiting_[next_bucket_] == 0) Launch(next_bucket_++);
}

void GradientReducer::Launch(int bucket) {
  const ShardLayout& layout = params_->layout();
  const LayoutBucket& b = layout.buckets()[bucket];
  const int64_t owned = layout.OwnedBegin(bucket, group_->rank()) - b.begin;
  PendingReduction launch;
  at::Tensor in = grads_->Input(bucket, arrived_);
  // The input is scratch (only the owned slice is kept), so where the transport's reduce-scatter
  // would copy it whole and all-reduce the copy, all-reducing it in place gives the same owned
  // slice without the copy or an output buffer.
  const bool quantized = options_.quantized.intra != nullptr && !grads_->keeps_whole_buckets();
  if (!quantized && (grads_->keeps_whole_buckets() || !options_.reduce_scatter ||
                     group_->reduce_scatter_copies_input())) {
    launch.work = group_->AllReduceAsync(in, ReduceOp::kAvg);
    launch.after.push_back([this, bucket, in, owned, slice = b.slice] {
      return grads_->Keep(bucket, in.narrow(0, owned, slice));
    });
  } else {
    at::Tensor buffer = scratch_->Take(largest_bucket_ / layout.world_size(), in.scalar_type());
    at::Tensor out = buffer.narrow(0, 0, b.slice);
    launch.work = quantized ? comm::QuantizedReduceScatterAsync(options_.quantized, in, out)
                            : group_->ReduceScatterAsync(in, out, ReduceOp::kAvg);
    launch.after.push_back([this, bucket, out, buffer]() mutable {
      absl::Status s = grads_->Keep(bucket, out);
      scratch_->Return(std::move(buffer));
      return s;
    });
  }
  launch.bucket = bucket;
  launch.numel = b.numel;
  in_flight_numel_ += b.numel;
  pending_.push_back(std::move(launch));
  const int64_t budget = kBucketsInFlight * params_->layout().bucket_numel();
  while (pending_.size() > 1 && in_flight_numel_ > budget) Drain(pending_.size() - 1);
}

void GradientReducer::Drain(size_t keep) {
  while (pending_.size() > keep) {
    PendingReduction p = std::move(pending_.front());
    pending_.pop_front();
    in_flight_numel_ -= p.numel;
    // The copy-out below runs on the device stream after the reduction; on a stream-ordered
    // transport (NCCL) the host does not wait here, only in WaitStreamOrdered.
    absl::Status s = p.work.WaitOnStream();
    stream_ordered_.push_back(p.work);
    if (s.ok() && pending_error_.ok()) {
      try {
        c10::NoGradGuard no_grad;
        for (auto& f : p.after) s.Update(f());
        if (boundary_ && options_.on_owned_final && grads_->holds_owned_slices()) {
          options_.on_owned_final(grads_->OwnedOf(p.bucket));
        }
      } catch (const c10::Error& e) {
        s = absl::InternalError(absl::StrCat("gradient copy-out: ", e.what_without_backtrace()));
      }
    }
    if (pending_error_.ok()) pending_error_ = s;
  }
}

absl::Status GradientReducer::FinishBackward(bool ignore_unused) {
  const auto start = std::chrono::steady_clock::now();
  active_ = false;
  std::vector<std::string> unused;
  for (int i = 0; i < params_->num_params(); ++i) {
    if (!arrived_[i] && params_->layout().param_numel(i) > 0) unused.push_back(params_->name(i));
  }
  absl::Status status = hook_error_;
  if (status.ok() && !unused.empty() && !ignore_unused) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "Backward on rank ", group_->rank(), ": parameter(s) ", absl::StrJoin(unused, ", "),
        " received no gradient; set ignore_unused_parameters to treat them as zero"));
  }
  if (reduce_) {
    // Unused parameters contribute zeros; everything not yet launched goes now, in bucket order.
    // Even when this rank is about to fail: the other ranks must not wait for its buckets until
    // the timeout; they learn of the failure at their next collective, when this rank is gone.
    std::fill(waiting_.begin(), waiting_.end(), 0);
    LaunchReady();
  }
  Drain(0);
  scratch_->Clear();  // between steps a rank holds only the gradients it keeps
  if (reduce_) pending_error_ = grads_->FinishPass(pending_error_);
  absl::Status waited = pending_error_;
  pending_error_ = absl::OkStatus();
  for (const auto& [name, p] : params_->params()) {
    at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
    grad = at::Tensor();
  }
  last_comm_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) return status;
  return waited;
}

absl::Status GradientReducer::WaitStreamOrdered() const {
  absl::Status s = comm::WaitAll(stream_ordered_);
  stream_ordered_.clear();
  return s;
}

std::vector<GradSegment> GradientReducer::OwnedGrads() const { return grads_->Owned(); }

void GradientReducer::Zero() { grads_->Zero(); }

int64_t GradientReducer::grad_bytes() const { return grads_->nbytes(); }

bool GradientReducer::sinks_grads() const { return grads_->sink() != nullptr; }

}  // namespace zerotrain::partition
