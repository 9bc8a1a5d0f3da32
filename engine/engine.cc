// Engine construction, Backward and the memory accounting (Step lives in engine_step.cc).
#include "engine/engine.h"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/flat_store.h"
#include "engine/master_state.h"
#include "engine/muon_gradients.h"
#include "engine/sharded_store.h"
#include "engine/store_grad_sink.h"
#include "engine/tensor_memory.h"
#include "offload/pinned_host_pool.h"
#include "offload/sub_group_store.h"
#include "offload/swap_space.h"
#include "offload/transfer_stream.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

at::ScalarType ModelDtype(Precision p) {
  switch (p) {
    case Precision::kBFloat16:
      return at::kBFloat16;
    case Precision::kFloat16:
      return at::kHalf;
    default:
      return at::kFloat;
  }
}

// Where the model's tensors live and in what type from Create on, as Module::to would set them:
// integer tensors keep their type.
void MoveTensors(ModelTensors& model, const c10::Device& device, Precision precision) {
  c10::NoGradGuard no_grad;
  auto move = [&](at::Tensor& t) {
    at::ScalarType type = t.scalar_type();
    if (precision != Precision::kFloat32 && at::isFloatingType(type)) type = ModelDtype(precision);
    if (t.device() != device || t.scalar_type() != type) t.set_data(t.to(device, type));
  };
  for (ModelTensors::Param& p : model.trainable) move(p.tensor);
  for (at::Tensor& t : model.frozen) move(t);
  for (at::Tensor& t : model.buffers) move(t);
}

// Stages 0-2's gradients, ZeRO's definition: stage 1 shards the optimizer state (a rank steps its
// owned slices of the full gradients), stage 2 the gradients too.
partition::GradKeeping FlatKeeping(int stage) {
  if (stage == 0) return partition::GradKeeping::kWhole;
  return stage == 1 ? partition::GradKeeping::kOwnedSlices : partition::GradKeeping::kShard;
}

// A run's identity in its checkpoints (checkpoint/shard_identity.h): random, never 0 (0 marks
// a format 1 checkpoint), and independent of LibTorch's generators, which training seeds.
uint64_t NewRunId() {
  std::random_device device;
  const uint64_t time =
      static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  const uint64_t id = ((static_cast<uint64_t>(device()) << 32) | device()) ^
                      (time * 0x9E3779B97F4A7C15ull) ^ static_cast<uint64_t>(::getpid());
  return id == 0 ? 1 : id;
}

}  // namespace

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(torch::nn::Module& module,
                                                       const EngineOptions& options,
                                                       comm::ProcessGroup* group) {
  // LibTorch's own Module::to first, which casts integer buffers too, as it always has here.
  try {
    if (auto device = DeviceRuntime::For(options.device); device.ok()) {
      module.to((*device)->device());
    }
    if (options.precision != Precision::kFloat32) module.to(ModelDtype(options.precision));
  } catch (const c10::Error& err) {
    // Reported by the Create below, once every rank has met.
  }
  return Create(TensorsOf(module), options, group);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(ModelTensors model,
                                                       const EngineOptions& options,
                                                       comm::ProcessGroup* group) {
  const std::string where = absl::StrCat("Engine::Create on rank ", group->rank(), ": ");
  // Large CPU blocks from here on are mapped by the counter, so freed ones do not stay in glibc's
  // heaps (tensor_memory.h); the module's tensors, if made before, are simply not counted.
  InstallCpuTensorCounter();
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  // The engine's one choice by device: what differs between host and device work is asked of
  // its runtime from here on. "cuda" alone gets the current device's index, so that device
  // comparisons (is a gradient already where the optimizer state is?) are exact. A device of
  // another type fails in ValidateEngineOptions below, once the ranks have met, before any use.
  if (auto runtime = DeviceRuntime::For(options.device); runtime.ok()) {
    e->runtime_ = *std::move(runtime);
    e->options_.device = e->runtime_->device();
  }
  e->group_ = group;
  // Local problems are only reported after the ranks have met, so that a rank that fails here
  // does not leave the others waiting in the fingerprint exchange until the timeout.
  absl::Status local = WithPrefix(ValidateEngineOptions(options), where);
  auto batch = ResolveBatchSizes(options, group->world_size());
  if (batch.ok()) {
    e->batch_ = *batch;
  } else if (local.ok()) {
    local = WithPrefix(batch.status(), where);
  }
  try {
    if (local.ok()) MoveTensors(model, e->options_.device, options.precision);
  } catch (const c10::Error& err) {
    if (local.ok()) local = absl::InternalError(absl::StrCat(where, err.what_without_backtrace()));
  }
  partition::NamedTensors named;
  std::vector<int> owner;
  for (const ModelTensors::Param& p : model.trainable) {
    named.emplace_back(p.name, p.tensor);
    owner.push_back(p.submodule);
  }
  e->model_ = std::move(model);
  if (named.empty() && local.ok()) {
    local = absl::InvalidArgumentError(
        absl::StrCat(where, "the module has no trainable parameters (none with requires_grad)"));
  }
  for (const auto& [name, p] : named) {
    const at::ScalarType t = p.scalar_type();
    if (local.ok() && t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) {
      // The optimizer kernels read and write float32, bfloat16 and float16 only.
      local = absl::InvalidArgumentError(absl::StrCat(
          where, "parameter '", name, "' is ", c10::toString(t),
          "; the engine trains Float, "
          "BFloat16 and Half parameters (cast the module, or set requires_grad false)"));
    }
  }
  // Backward produces gradients roughly in reverse registration order; laying parameters out
  // that way lets the first buckets fill (and their reductions start) first.
  std::reverse(named.begin(), named.end());
  std::reverse(owner.begin(), owner.end());
  std::vector<int> segment_starts;  // stage 3 gathers each submodule's parameters as one
  for (size_t i = 1; i < owner.size(); ++i) {
    if (owner[i] != owner[i - 1]) segment_starts.push_back(static_cast<int>(i));
  }
  const partition::ShardedInit* init = options.sharded_init;
  if (init != nullptr && local.ok() && init->bucket_numel() != Stage3BucketNumel(options)) {
    local = absl::InvalidArgumentError(
        absl::StrCat(where, "the ShardedInit cut buckets of ", init->bucket_numel(),
                     " elements, the engine "
                     "uses ",
                     Stage3BucketNumel(options), " (Stage3BucketNumel of these options)"));
  }
  std::vector<ParamSignature> signature;
  for (const auto& [name, p] : named) {
    signature.push_back(
        {name, init ? init->FullShapeOf(p) : p.sizes().vec(), c10::toString(p.scalar_type())});
  }
  ZT_RETURN_IF_ERROR(e->CheckRanksAgree(signature, local));
  ZT_RETURN_IF_ERROR(e->AgreeAllOk(e->InitOffload(), where));
  ParamStoreInputs in;
  in.options = &e->options_;
  in.group = group;
  in.params = std::move(named);
  in.segment_starts = std::move(segment_starts);
  in.shard = e->ParamShardOptionsFor();
  // The one choice by stage: every later difference between the stages is the store's, and the
  // gradients the reducer keeps are the ones the store steps.
  ZT_ASSIGN_OR_RETURN(e->store_, options.stage == 3
                                     ? ShardedStore::Create(in)
                                     : FlatStore::Create(in, FlatKeeping(options.stage)));
  // What the store copied in and freed (ShardedInit's slices, allocated before the counter and so
  // in glibc's heaps) goes back to the system before the optimizer state is built.
  ReturnFreedHostMemory();
  // FlatParams groups parameters by dtype: its order is the engine's.
  const partition::NamedTensors& laid_out = e->flat_params().params();
  for (int i = 0; i < static_cast<int>(laid_out.size()); ++i) {
    e->param_index_[laid_out[i].second.unsafeGetTensorImpl()] = i;
  }
  ZT_RETURN_IF_ERROR(e->BroadcastFrozenState());
  partition::ReducerOptions ro;
  ro.keeping = e->store_->grad_keeping();
  ro.overlap_comm = options.overlap_comm;
  ro.reduce_scatter = options.reduce_scatter;
  // With offload_optimizer from a GPU, a bucket's gradients start for host memory as soon as they
  // are final, while backward still runs (nothing moves where they share the state's device).
  ro.on_owned_final = [raw = e.get()](const partition::GradSegment& g) {
    raw->master_->staging().StartIn(g.grads);
  };
  // With the optimizer state on NVMe the gradients go there too, as backward reduces them; except
  // for Muon, which reads the reduced gradients whole before the step and so keeps their shard in
  // host memory, as offload_optimizer cpu does (the state itself stays on NVMe).
  const bool muon_reads_grads =
      options.optimizer == OptimizerKind::kMuon && !options.optimizer_factory;
  if (options.offload_optimizer.device == OffloadDevice::kNvme && !muon_reads_grads) {
    e->grad_sink_ = std::make_unique<StoreGradSink>();
    ro.grad_sink = e->grad_sink_.get();
  }
  if (options.quantize_gradients) {
    auto split = comm::SplitByNode(*group);
    ZT_RETURN_IF_ERROR(e->AgreeAllOk(split.status(), where));
    e->node_groups_ = *std::move(split);
    ro.quantized = e->node_groups_.view();
  }
  ZT_ASSIGN_OR_RETURN(e->reducer_,
                      partition::GradientReducer::Create(group, &e->flat_params(), ro));
  std::unique_ptr<ShardOptimizer> optimizer = MakeShardOptimizer(options);
  if (!options.optimizer_factory) e->lr_ = BuiltInLr(options);
  if (optimizer == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, "optimizer_factory returned null"));
  }
  // ValidateEngineOptions made it once already.
  ZT_ASSIGN_OR_RETURN(e->schedule_, optim::MakeLrSchedule(options.lr_schedule));
  std::vector<MuonMatrix> muon;
  MasterStateInputs mi;
  if (options.optimizer == OptimizerKind::kMuon && !options.optimizer_factory) {
    std::map<std::string, std::vector<int64_t>> shape_of;
    for (const ParamSignature& p : signature) shape_of[p.name] = p.shape;
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& [name, p] : laid_out) {
      names.push_back(name);
      shapes.push_back(shape_of[name]);
    }
    auto picked = PickMuonMatrices(names, shapes, options.muon.use_muon);
    // The same parameters and rule on every rank: every rank fails alike.
    if (!picked.ok()) return WithPrefix(picked.status(), where);
    muon = *std::move(picked);
    mi.param_groups.assign(names.size(), 0);
    for (const MuonMatrix& m : muon) mi.param_groups[m.param] = 1;
  }
  mi.options = &e->options_;
  mi.group = group;
  mi.params = e->store_.get();
  mi.pool = e->host_pool_.get();
  mi.transfer = e->transfer_.get();
  mi.swap = e->swap_.get();
  mi.grads_in_store = e->reducer_->sinks_grads();
  mi.copies = &e->host_copies_;
  mi.device = e->runtime_.get();
  auto master = MasterState::Create(mi, std::move(optimizer));
  // A rank whose swap directory or host memory fails must not leave the others to train alone.
  ZT_RETURN_IF_ERROR(e->AgreeAllOk(WithPrefix(master.status(), where), where));
  e->master_ = std::move(*master);
  if (e->grad_sink_ != nullptr) e->grad_sink_->Attach(&e->master_->store());
  if (!muon.empty()) {
    // Assembled in batches of stage 3's bucket size, as DeepSpeed's stage 3 chunks them.
    const MuonGradientOptions mo{options.muon.momentum, options.muon.ns_method,
                                 Stage3BucketNumel(options)};
    ZT_ASSIGN_OR_RETURN(e->muon_, MuonGradients::Create(mo, std::move(muon), e->store_.get(),
                                                        e->master_.get(), group));
  }
  if (options.precision == Precision::kFloat16) {
    ZT_ASSIGN_OR_RETURN(auto scaler, optim::LossScaler::Create(options.fp16));
    e->scaler_ = std::make_unique<optim::LossScaler>(scaler);
  }
  // The engine's shard now holds the slices ShardedInit cut: keeping both would double them. Only
  // now, so that a Create that failed can be retried with the same init.
  if (options.sharded_init != nullptr) options.sharded_init->ReleaseShards();
  // Create's one-off blocks (the shard written out, the master filled) need not stay cached.
  e->host_pool_->ReleaseCached();
  ReturnFreedHostMemory();
  e->clock_ = e->runtime_->MakeClock();
  e->clock_->Lap(StepPhase::kUntimed);
  return e;
}

absl::Status Engine::CheckRanksAgree(const std::vector<ParamSignature>& params,
                                     const absl::Status& local) {
  const Fingerprint f = MakeFingerprint(options_, batch_, params);
  // The fingerprints, then this rank's candidate run id, then whether its setup failed.
  const int parts = static_cast<int>(f.parts.size());
  const int k = parts + 2;
  const int world = group_->world_size();
  at::Tensor mine = at::empty({k}, at::kLong);
  int64_t* m = mine.data_ptr<int64_t>();
  for (int i = 0; i < parts; ++i) m[i] = static_cast<int64_t>(f.parts[i].second);
  m[parts] = static_cast<int64_t>(NewRunId());
  m[k - 1] = local.ok() ? 0 : 1;
  at::Tensor all = at::empty({k * world}, at::kLong);
  absl::Status s = group_->AllGather(mine, all);
  if (!local.ok()) return local;
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("Engine::Create: comparing ranks: ", s.message()));
  }
  const int64_t* v = all.data_ptr<int64_t>();
  run_id_ = static_cast<uint64_t>(v[parts]);  // rank 0's: one id for the whole run
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (v[r * k + k - 1] != 0) failed.push_back(r);
  }
  if (!failed.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Engine::Create on rank ", group_->rank(), ": rank(s) ",
                     absl::StrJoin(failed, ","), " failed their own checks (see their errors)"));
  }
  std::vector<std::string> differ;
  for (int i = 0; i < parts; ++i) {
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
  return absl::FailedPreconditionError(
      absl::StrCat("Engine::Create on rank ", group_->rank(), ": ranks disagree on ",
                   absl::StrJoin(differ, "; "),
                   ". Every rank must build the same model with the same engine options."));
}

absl::Status Engine::BroadcastFrozenState() {
  // As DDP and deepspeed.initialize do: however each rank initialised its module, training starts
  // from rank 0's parameters and buffers, so no seed discipline is needed for correctness.
  try {
    c10::NoGradGuard no_grad;
    // Frozen parameters and buffers are not the engine's to shard, but they must start equal
    // too, or ranks diverge silently. Every rank walks them in the same (registration) order.
    std::vector<at::Tensor> others;
    for (const at::Tensor& p : model_.frozen) others.push_back(p.detach());
    for (const at::Tensor& t : model_.buffers) others.push_back(t);
    for (const at::Tensor& t : others) {
      if (t.numel() > 0) ZT_RETURN_IF_ERROR(BroadcastFromRankZero(group_, t));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("Engine::Create: broadcasting rank 0's frozen parameters and buffers: ",
                     e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

bool Engine::at_accumulation_boundary() const {
  return (micro_steps_ + 1) % batch_.gradient_accumulation_steps == 0;
}

double Engine::loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }

absl::Status Engine::Backward(const at::Tensor& loss) {
  clock_->Lap(StepPhase::kForward);
  const std::string where =
      absl::StrCat("Backward on rank ", group_->rank(), " (micro step ", micro_steps_, "): ");
  if (!loss.defined() || loss.numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, "the loss must be a scalar tensor"));
  }
  if (backward_pending_) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "Backward called twice; call Step() after every Backward()"));
  }
  // Gradient copies a skipped or failed step started are dropped before new ones start.
  if (absl::Status reset = master_->staging().Reset(); !reset.ok()) {
    return WithPrefix(reset, where);
  }
  reducer_->BeginBackward(at_accumulation_boundary());
  store_->BeginBackward();
  try {
    const double scale = loss_scale() / static_cast<double>(batch_.gradient_accumulation_steps);
    loss.to(at::kFloat).mul(scale).backward();
  } catch (const c10::Error& e) {
    (void)reducer_->FinishBackward(true);
    (void)store_->EndBackward(/*failed=*/true);
    return absl::InternalError(absl::StrCat(where, e.what_without_backtrace()));
  }
  clock_->Lap(StepPhase::kBackward);
  absl::Status s = reducer_->FinishBackward(options_.ignore_unused_parameters);
  absl::Status released = store_->EndBackward(/*failed=*/false);
  if (s.ok() && !released.ok()) s = WithPrefix(released, where);
  clock_->Lap(StepPhase::kBackwardComm);
  if (!s.ok()) return s;
  backward_pending_ = true;
  return absl::OkStatus();
}

void Engine::set_lr(double lr) {
  lr_ = lr;
  master_->optimizer().set_lr(lr);
}

absl::Status Engine::set_betas(double beta1, double beta2) {
  return master_->optimizer().set_betas(beta1, beta2);
}

ModelStateBytes Engine::model_state_bytes() const {
  ModelStateBytes b;
  store_->AddParamBytes(&b);
  b.grads = reducer_->grad_bytes();
  master_->AddBytes(&b);
  for (const at::Tensor& t : model_.buffers) {
    b.buffers += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return b;
}

TierTraffic Engine::traffic() const {
  TierTraffic t;
  const comm::HostDeviceBytes staged = group_->staging_traffic();
  const comm::HostDeviceBytes own = host_copies_.totals();
  t.device_to_host = staged.device_to_host + own.device_to_host;
  t.host_to_device = staged.host_to_device + own.host_to_device;
  for (const offload::SwapSpace* swap : {swap_.get(), param_swap_.get()}) {
    if (swap == nullptr) continue;
    const offload::SwapTraffic s = swap->traffic();
    t.nvme_read += s.bytes_read;
    t.nvme_written += s.bytes_written;
  }
  return t;
}

double Engine::formula_bytes() const {
  MasterBytes k;
  if (options_.bf16_master_weights) k.master = 2;
  if (options_.bf16_optimizer_states) k.states = 4;
  k.master_is_shard = master_->aliases_params();
  return ZeroFormulaBytes(options_.stage, options_.precision != Precision::kFloat32,
                          flat_params().layout().padded_numel(), group_->world_size(), k,
                          options_.stage == 3 ? options_.stage3.hpz_partition_size : 1);
}

}  // namespace zerotrain::engine
