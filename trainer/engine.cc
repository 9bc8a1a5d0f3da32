// Engine construction, Backward and the memory accounting (Step lives in engine_step.cc).
#include "trainer/engine.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"

namespace zerotrain::trainer {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

at::ScalarType ModelDtype(Precision p) {
  switch (p) {
    case Precision::kBFloat16: return at::kBFloat16;
    case Precision::kFloat16: return at::kHalf;
    default: return at::kFloat;
  }
}

}  // namespace

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(torch::nn::Module& module,
                                                       const EngineOptions& options,
                                                       comm::ProcessGroup* group) {
  const std::string where = absl::StrCat("Engine::Create on rank ", group->rank(), ": ");
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  e->group_ = group;
  e->module_ = &module;
  // Local problems are only reported after the ranks have met, so that a rank that fails here
  // does not leave the others waiting in the fingerprint exchange until the timeout.
  absl::Status local;
  if (options.stage < 0 || options.stage > 2) {
    local = absl::InvalidArgumentError(
        absl::StrCat(where, "stage ", options.stage, " (this engine runs stages 0, 1 and 2)"));
  }
  auto batch = ResolveBatchSizes(options, group->world_size());
  if (batch.ok()) {
    e->batch_ = *batch;
  } else if (local.ok()) {
    local = absl::Status(batch.status().code(), absl::StrCat(where, batch.status().message()));
  }
  partition::NamedTensors named;
  try {
    if (options.precision != Precision::kFloat32) module.to(ModelDtype(options.precision));
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      if (item.value().requires_grad()) named.emplace_back(item.key(), item.value());
    }
  } catch (const c10::Error& err) {
    if (local.ok()) local = absl::InternalError(absl::StrCat(where, err.what_without_backtrace()));
  }
  if (named.empty() && local.ok()) {
    local = absl::InvalidArgumentError(absl::StrCat(
        where, "the module has no trainable parameters (none with requires_grad)"));
  }
  // Backward produces gradients roughly in reverse registration order; laying parameters out
  // that way lets the first buckets fill (and their reductions start) first.
  std::reverse(named.begin(), named.end());
  std::vector<ParamSignature> signature;
  for (const auto& [name, p] : named) {
    signature.push_back({name, p.sizes().vec(), c10::toString(p.scalar_type())});
  }
  ZT_RETURN_IF_ERROR(e->CheckRanksAgree(signature, local));
  ZT_ASSIGN_OR_RETURN(auto flat, partition::FlatParams::Create(named, group->world_size(),
                                                               options.reduce_bucket_size));
  e->flat_ = std::make_unique<partition::FlatParams>(std::move(flat));
  ZT_RETURN_IF_ERROR(e->BroadcastInitialState());
  partition::ReducerOptions ro;
  ro.stage = options.stage;
  ro.overlap_comm = options.overlap_comm;
  ro.reduce_scatter = options.reduce_scatter;
  ZT_ASSIGN_OR_RETURN(e->reducer_, partition::GradientReducer::Create(group, e->flat_.get(), ro));
  ZT_RETURN_IF_ERROR(e->InitMaster());
  if (options.optimizer_factory) {
    e->optimizer_ = options.optimizer_factory();
  } else if (options.optimizer == OptimizerKind::kSgd) {
    e->optimizer_ = MakeSgdShardOptimizer(options.sgd);
    e->lr_ = options.sgd.lr;
  } else {
    e->optimizer_ = MakeAdamShardOptimizer(options.adam);
    e->lr_ = options.adam.lr;
  }
  if (e->optimizer_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, "optimizer_factory returned null"));
  }
  ZT_RETURN_IF_ERROR(e->optimizer_->Init(e->master_.numel()));
  if (options.precision == Precision::kFloat16) {
    ZT_ASSIGN_OR_RETURN(auto scaler, optim::LossScaler::Create(options.fp16));
    e->scaler_ = std::make_unique<optim::LossScaler>(scaler);
  }
  e->last_call_end_ = Now();
  return e;
}

absl::Status Engine::CheckRanksAgree(const std::vector<ParamSignature>& params,
                                     const absl::Status& local) {
  const Fingerprint f = MakeFingerprint(options_, batch_, params);
  const int k = static_cast<int>(f.parts.size()) + 1;  // the last entry: this rank's setup failed
  const int world = group_->world_size();
  at::Tensor mine = at::empty({k}, at::kLong);
  int64_t* m = mine.data_ptr<int64_t>();
  for (int i = 0; i + 1 < k; ++i) m[i] = static_cast<int64_t>(f.parts[i].second);
  m[k - 1] = local.ok() ? 0 : 1;
  at::Tensor all = at::empty({k * world}, at::kLong);
  absl::Status s = group_->AllGather(mine, all);
  if (!local.ok()) return local;
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("Engine::Create: comparing ranks: ", s.message()));
  }
  const int64_t* v = all.data_ptr<int64_t>();
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (v[r * k + k - 1] != 0) failed.push_back(r);
  }
  if (!failed.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Engine::Create on rank ", group_->rank(), ": rank(s) ", absl::StrJoin(failed, ","),
        " failed their own checks (see their errors)"));
  }
  std::vector<std::string> differ;
  for (int i = 0; i + 1 < k; ++i) {
    std::vector<int> ranks;
    for (int r = 1; r < world; ++r) {
      if (v[r * k + i] != v[i]) ranks.push_back(r);
    }
    if (!ranks.empty()) {
      differ.push_back(absl::StrCat(f.parts[i].first, " (rank(s) ", absl::StrJoin(ranks, ","),
                                    " differ from rank 0)"));
    }
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "Engine::Create on rank ", group_->rank(), ": ranks disagree on ",
      absl::StrJoin(differ, "; "),
      ". Every rank must build the same model with the same engine options."));
}

absl::Status Engine::BroadcastInitialState() {
  // As DDP and deepspeed.initialize do: however each rank initialised its module, training starts
  // from rank 0's parameters and buffers, so no seed discipline is needed for correctness.
  ZT_RETURN_IF_ERROR(group_->Broadcast(flat_->flat(), 0));
  for (const at::Tensor& t : module_->buffers(/*recurse=*/true)) {
    if (t.numel() > 0 && t.is_contiguous()) ZT_RETURN_IF_ERROR(group_->Broadcast(t, 0));
  }
  return absl::OkStatus();
}

absl::Status Engine::InitMaster() {
  try {
    c10::NoGradGuard no_grad;
    const at::Tensor& flat = flat_->flat();
    if (options_.stage == 0) {
      master_aliases_params_ = flat.scalar_type() == at::kFloat;
      master_ = master_aliases_params_ ? flat : flat.to(at::kFloat);
      return absl::OkStatus();
    }
    const partition::ShardLayout& layout = flat_->layout();
    master_ = at::empty({layout.shard_numel()}, flat.options().dtype(at::kFloat));
    for (int k = 0; k < static_cast<int>(layout.buckets().size()); ++k) {
      const partition::LayoutBucket& b = layout.buckets()[k];
      master_.narrow(0, b.shard_offset, b.slice)
          .copy_(flat.narrow(0, layout.OwnedBegin(k, group_->rank()), b.slice));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("Engine: master weights: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

bool Engine::at_accumulation_boundary() const {
  return (micro_steps_ + 1) % batch_.gradient_accumulation_steps == 0;
}

double Engine::loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }

absl::Status Engine::Backward(const at::Tensor& loss) {
  const double start = Now();
  times_.forward += start - last_call_end_;
  const std::string where = absl::StrCat("Backward on rank ", group_->rank(), " (micro step ",
                                         micro_steps_, "): ");
  if (!loss.defined() || loss.numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, "the loss must be a scalar tensor"));
  }
  if (backward_pending_) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "Backward called twice; call Step() after every Backward()"));
  }
  reducer_->BeginBackward(at_accumulation_boundary());
  try {
    const double scale = loss_scale() / static_cast<double>(batch_.gradient_accumulation_steps);
    loss.to(at::kFloat).mul(scale).backward();
  } catch (const c10::Error& e) {
    (void)reducer_->FinishBackward(true);
    return absl::InternalError(absl::StrCat(where, e.what_without_backtrace()));
  }
  const double autograd_end = Now();
  absl::Status s = reducer_->FinishBackward(options_.ignore_unused_parameters);
  times_.backward += autograd_end - start;
  times_.backward_comm += Now() - autograd_end;
  last_call_end_ = Now();
  if (!s.ok()) return s;
  backward_pending_ = true;
  return absl::OkStatus();
}

ModelStateBytes Engine::model_state_bytes() const {
  ModelStateBytes b;
  b.params = flat_->flat().numel() * static_cast<int64_t>(flat_->flat().element_size());
  b.grads = reducer_->grad_bytes();
  b.master = master_aliases_params_ ? 0 : master_.numel() * 4;
  b.optimizer_states = optimizer_->state_bytes();
  for (const at::Tensor& t : module_->buffers(/*recurse=*/true)) {
    b.buffers += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return b;
}

double Engine::formula_bytes() const {
  return ZeroFormulaBytes(options_.stage, options_.precision != Precision::kFloat32,
                          flat_->layout().padded_numel(), group_->world_size());
}

}  // namespace zerotrain::trainer
