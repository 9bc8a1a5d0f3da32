// Engine::SaveCheckpoint and Engine::LoadCheckpoint: the engine says which arrays each rank saves
// (its slice of the fp32 master weights and optimizer states, plus its RNG states: the CPU's and
// each CUDA device's it uses) and agrees
// across ranks between the phases of checkpoint/tag_writer.h, which owns the files, the
// manifest and `latest`. Loading re-slices through the saved layout, so any world
// size and stage 0-3 can load any checkpoint of the same model (docs/CHECKPOINT.md).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/shard_file.h"
#include "checkpoint/tag_retention.h"
#include "checkpoint/tag_writer.h"
#include "engine/engine.h"
#include "engine/master_state.h"
#include "engine/tensor_memory.h"
#include "offload/memory_roles.h"
#include "offload/sub_group_store.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using checkpoint::ArrayDType;

// A save and a load move the state through host memory this many elements at a time (4 MiB), so
// neither holds a second copy of a sub-group, however large sub_group_size is.
constexpr int64_t kPieceNumel = int64_t{1} << 20;

// Keyed by device index, next to kRngArray; a checkpoint without them (older, or saved without
// CUDA) loads and leaves the CUDA generators as they are.
std::string CudaRngArray(const c10::Device& device) {
  return absl::StrCat("cuda_rng_state_", static_cast<int>(device.index()));
}

// LibTorch's default generator of `device`, the host's or a CUDA device's.
at::Generator GeneratorOf(const c10::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

at::Tensor GetRngState(const c10::Device& device) {
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetRngState(const c10::Device& device, const std::vector<uint8_t>& bytes) {
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(state.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

std::string ShapeText(const checkpoint::ParameterEntry& p) {
  return absl::StrCat("'", p.name(), "' [", absl::StrJoin(p.shape(), ", "), "] ", p.dtype());
}

checkpoint::ParameterEntry EntryOf(const std::string& name, const std::vector<int64_t>& shape,
                                   at::ScalarType dtype) {
  checkpoint::ParameterEntry p;
  p.set_name(name);
  int64_t numel = 1;
  for (int64_t d : shape) {
    p.add_shape(d);
    numel *= d;
  }
  p.set_dtype(c10::toString(dtype));
  p.set_numel(numel);
  return p;
}

}  // namespace

absl::Status Engine::CheckTagAgrees(const std::string& tag) const {
  if (options_.tag_validation == TagValidation::kIgnore) return absl::OkStatus();
  uint64_t hash = 1469598103934665603ull;  // FNV-1a: the same on every rank
  for (unsigned char c : tag) hash = (hash ^ c) * 1099511628211ull;
  at::Tensor mine = at::tensor({static_cast<int64_t>(hash)}, at::kLong);
  at::Tensor all = at::empty({group_->world_size()}, at::kLong);
  ZT_RETURN_IF_ERROR(group_->AllGather(mine, all));
  for (int r = 0; r < group_->world_size(); ++r) {
    if (all[r].item<int64_t>() == mine.item<int64_t>()) continue;
    const std::string message =
        absl::StrCat("checkpoint tag \"", tag, "\" is not rank ", r,
                     "'s: every rank must save under one tag (checkpoint.tag_validation)");
    if (options_.tag_validation == TagValidation::kFail) {
      return absl::FailedPreconditionError(message);
    }
    std::fprintf(stderr, "zerotrain: warning: rank %d: %s\n", group_->rank(), message.c_str());
    break;
  }
  return absl::OkStatus();
}

absl::Status Engine::SaveCheckpoint(const std::string& dir, const std::string& tag_in,
                                    const std::map<std::string, std::string>& client_state) {
  const int rank = group_->rank();
  const std::string where = absl::StrCat("SaveCheckpoint on rank ", rank, ": ");
  const checkpoint::TagLocation at{
      dir, tag_in.empty() ? checkpoint::DefaultTag(optimizer_steps_) : tag_in};
  // First, and on every rank: it is a collective.
  absl::Status local = CheckTagAgrees(at.tag);
  if (local.ok()) local = checkpoint::ValidateTag(at.tag);
  if (local.ok() && (backward_pending_ || micro_steps_ % batch_.gradient_accumulation_steps != 0)) {
    local = absl::FailedPreconditionError(
        absl::StrCat("micro step ", micro_steps_,
                     " is inside an accumulation window; save after the Step() "
                     "that steps the optimizer (partial gradients are not saved)"));
  }
  if (local.ok() && !broken_.ok()) local = BrokenError();
  if (local.ok()) local = WaitStreamOrdered("");
  // Before anything is written: a store poisoned by a failed swap must not be saved.
  if (const absl::Status health = master_->store().health(); local.ok() && !health.ok()) {
    local = absl::FailedPreconditionError(absl::StrCat(
        "the optimizer state is unusable after an earlier I/O error: ", health.message()));
  }
  if (local.ok() && rank == 0) local = checkpoint::PrepareTag(at);
  local = WithPrefix(local, where);
  ZT_RETURN_IF_ERROR(AgreeAllOk(local, where));

  checkpoint::WrittenFile written;
  local = WithPrefix(WriteRankShard(at, &written), where);
  // Rank 0 needs every file's size and checksum for the manifest.
  const int world = group_->world_size();
  at::Tensor mine = at::tensor(
      {local.ok() ? int64_t{0} : int64_t{1}, written.size, static_cast<int64_t>(written.crc32c)},
      at::kLong);
  at::Tensor all = at::empty({3 * world}, at::kLong);
  absl::Status gathered = group_->AllGather(mine, all);
  if (local.ok() && !gathered.ok()) local = gathered;
  ZT_RETURN_IF_ERROR(AgreeAllOk(local, where));

  if (rank == 0) {
    std::vector<checkpoint::RankFile> files;
    const int64_t* v = all.data_ptr<int64_t>();
    for (int r = 0; r < world; ++r) {
      files.push_back(
          {r, v[3 * r + 1], static_cast<uint32_t>(v[3 * r + 2]), store_->SavesState(r)});
    }
    local = WithPrefix(checkpoint::CommitTag(at, SaveManifest(client_state), files), where);
    if (local.ok()) PruneOldTags(dir);
  }
  absl::Status agreed = AgreeAllOk(local, where);
  ReturnFreedHostMemory();
  return agreed;
}

void Engine::PruneOldTags(const std::string& dir) const {
  // The save is complete and `latest` names it: a tag that cannot be removed is worth a warning
  // on every save, not a failed save.
  auto removed = checkpoint::PruneTags(dir, options_.keep_last_checkpoints);
  if (!removed.ok()) {
    std::fprintf(stderr, "zerotrain: warning: keep_last_checkpoints %lld: %s\n",
                 static_cast<long long>(options_.keep_last_checkpoints),
                 std::string(removed.status().message()).c_str());
  }
}

absl::Status Engine::WriteRankShard(const checkpoint::TagLocation& at,
                                    checkpoint::WrittenFile* written) const {
  // The store says which ranks save state and which spans of the master their files hold
  // (stage 0 holds the whole master on every rank: rank 0 saves it as a 1-rank layout).
  const int rank = group_->rank();
  const std::vector<MasterSpan> spans = store_->SavesState(rank)
                                            ? store_->CheckpointSpans(master_->numel())
                                            : std::vector<MasterSpan>{};
  try {
    std::vector<checkpoint::ArraySpec> specs;
    if (!spans.empty()) {
      int64_t numel = 0;
      for (const MasterSpan& span : spans) numel += span.numel;
      specs.push_back({checkpoint::kMasterArray, ArrayDType::kFloat32, numel});
      for (const std::string& name : master_->optimizer().state_names()) {
        specs.push_back({name, ArrayDType::kFloat32, numel});
      }
    }
    std::vector<at::Tensor> rng = {GetRngState(c10::Device(c10::kCPU))};
    specs.push_back({checkpoint::kRngArray, ArrayDType::kBytes, rng[0].numel()});
    ZT_ASSIGN_OR_RETURN(const std::vector<c10::Device> cuda, runtime_->RngDevices());
    for (const c10::Device& d : cuda) {
      rng.push_back(GetRngState(d));
      specs.push_back({CudaRngArray(d), ArrayDType::kBytes, rng.back().numel()});
    }
    const checkpoint::ShardIdentity identity{
        run_id_, at.tag, optimizer_steps_, rank, group_->world_size(), options_.stage};
    ZT_ASSIGN_OR_RETURN(checkpoint::ShardStreamWriter file,
                        checkpoint::OpenRankFile(at, identity, std::move(specs)));
    if (!spans.empty()) ZT_RETURN_IF_ERROR(AppendState(spans, &file));
    const int first_rng = spans.empty() ? 0 : master_->num_arrays();
    for (size_t i = 0; i < rng.size(); ++i) {
      ZT_RETURN_IF_ERROR(
          file.Append(first_rng + static_cast<int>(i), rng[i].data_ptr<uint8_t>(), rng[i].numel()));
    }
    ZT_ASSIGN_OR_RETURN(*written, file.Commit());
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
  return absl::OkStatus();
}

absl::Status Engine::AppendState(const std::vector<MasterSpan>& spans,
                                 checkpoint::ShardStreamWriter* file) const {
  // One sub-group at a time, as the optimizer step reads them: the save holds no more of the
  // state than a step does. Spans and sub-groups both ascend, so each array is appended in order.
  offload::MemoryRoleScope role(offload::MemoryRole::kOptimizerStates);
  return master_->VisitAll(offload::Access::kRead, [&](const MasterView& v) {
    for (const MasterSpan& span : spans) {
      const int64_t lo = std::max(span.begin, v.begin);
      const int64_t hi = std::min(span.begin + span.numel, v.begin + v.numel);
      if (lo >= hi) continue;
      for (int a = 0; a < master_->num_arrays(); ++a) {
        // The file is written from host memory; state on a device comes over a piece at a time.
        for (int64_t p = lo; p < hi; p += kPieceNumel) {
          const int64_t n = std::min(kPieceNumel, hi - p);
          const at::Tensor from = master_->Array(v.arrays[a] + (p - v.begin), n);
          const at::Tensor host = from.cpu();
          host_copies_.Count(from, host);
          ZT_RETURN_IF_ERROR(file->Append(a, host.data_ptr<float>(), n));
        }
      }
    }
    return absl::OkStatus();
  });
}

// Everything the manifest says but the file list and the tag (CommitTag adds those).
checkpoint::Manifest Engine::SaveManifest(
    const std::map<std::string, std::string>& client_state) const {
  checkpoint::Manifest m;
  m.set_run_id(run_id_);
  m.set_world_size(group_->world_size());
  m.set_stage(options_.stage);
  m.set_precision(PrecisionName(options_.precision));
  std::vector<ParamSignature> signature;
  const partition::FlatParams& fp = flat_params();
  for (int i = 0; i < fp.num_params(); ++i) {
    *m.add_params() = EntryOf(fp.name(i), store_->FullShape(i), fp.dtype(i));
    signature.push_back({fp.name(i), store_->FullShape(i), c10::toString(fp.dtype(i))});
  }
  for (int start : fp.layout().segment_starts()) m.add_segment_starts(start);
  const Fingerprint f = MakeFingerprint(options_, batch_, signature);
  if (!f.parts.empty()) m.set_options_fingerprint(f.parts[0].second);
  m.set_config_text(absl::StrCat(
      "stage: ", options_.stage, "\nprecision: ", PrecisionName(options_.precision),
      "\noptimizer: ", master_->optimizer().name(), "\ntrain_batch_size: ", batch_.train_batch_size,
      "\ngradient_accumulation_steps: ", batch_.gradient_accumulation_steps, "\n"));
  m.set_layout_world_size(store_->checkpoint_world_size());
  m.set_bucket_numel(fp.layout().bucket_numel());
  m.set_optimizer(master_->optimizer().name());
  for (const std::string& name : master_->optimizer().state_names()) m.add_state_arrays(name);
  if (scaler_) {
    const optim::LossScaler::State& s = scaler_->state();
    m.mutable_loss_scaler()->set_scale(s.scale);
    m.mutable_loss_scaler()->set_iteration(s.iteration);
    m.mutable_loss_scaler()->set_last_overflow_iteration(s.last_overflow_iteration);
    m.mutable_loss_scaler()->set_hysteresis_left(s.hysteresis_left);
  }
  m.set_micro_steps(micro_steps_);
  m.set_optimizer_steps(optimizer_steps_);
  m.set_skipped_steps(skipped_steps_);
  m.set_lr(lr_);
  for (const auto& [k, val] : client_state) (*m.mutable_client_state())[k] = val;
  return m;
}

absl::Status Engine::CheckModelMatches(const checkpoint::CheckpointReader& reader) const {
  const checkpoint::Manifest& m = reader.manifest();
  const std::string what = absl::StrCat("the model differs from checkpoint ", reader.tag_dir(), "/",
                                        checkpoint::kManifestFileName, ": ");
  // dtypes are compared only when the precision is the same: the master is fp32 either way, so
  // an fp32 checkpoint may resume in bf16 and vice versa.
  const bool same_precision = m.precision() == PrecisionName(options_.precision);
  const partition::FlatParams& fp = flat_params();
  const int n = std::min(fp.num_params(), m.params_size());
  for (int i = 0; i < n; ++i) {
    const checkpoint::ParameterEntry mine = EntryOf(fp.name(i), store_->FullShape(i), fp.dtype(i));
    const checkpoint::ParameterEntry& saved = m.params(i);
    const bool shape_same = std::equal(mine.shape().begin(), mine.shape().end(),
                                       saved.shape().begin(), saved.shape().end());
    if (mine.name() != saved.name() || !shape_same ||
        (same_precision && mine.dtype() != saved.dtype())) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, "parameter #", i, " (in engine order) is ", ShapeText(saved),
                       " in the checkpoint and ", ShapeText(mine), " in the model"));
    }
  }
  if (fp.num_params() != m.params_size()) {
    return absl::FailedPreconditionError(absl::StrCat(what, "the checkpoint has ", m.params_size(),
                                                      " parameters, the model ", fp.num_params(),
                                                      " (the first ", n, " agree)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> Engine::LoadCheckpoint(const std::string& dir,
                                                                          const std::string& tag) {
  const int rank = group_->rank();
  const std::string where = absl::StrCat("LoadCheckpoint on rank ", rank, ": ");
  // Everything that can refuse the checkpoint is read and checked first (the RNG states, every
  // checksum), so a rank failing leaves every engine unchanged; the state itself then streams
  // into the store a sub-group at a time, never whole.
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  std::vector<uint8_t> rng;
  std::vector<std::pair<c10::Device, std::vector<uint8_t>>> cuda_rng;
  absl::Status local = [&]() -> absl::Status {
    ZT_ASSIGN_OR_RETURN(reader, checkpoint::CheckpointReader::Open(dir, tag));
    ZT_RETURN_IF_ERROR(CheckModelMatches(*reader));
    const checkpoint::Manifest& m = reader->manifest();
    std::vector<std::string> want(m.state_arrays().begin(), m.state_arrays().end());
    const std::vector<std::string> have = master_->optimizer().state_names();
    if (want != have) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", reader->tag_dir(), " holds optimizer states [",
                       absl::StrJoin(want, ", "), "] (", m.optimizer(), "), this engine's ",
                       master_->optimizer().name(), " has [", absl::StrJoin(have, ", "), "]"));
    }
    std::vector<std::string> arrays = {checkpoint::kMasterArray};
    arrays.insert(arrays.end(), have.begin(), have.end());
    ZT_RETURN_IF_ERROR(reader->CheckStateArrays(arrays));
    if (m.world_size() == group_->world_size()) {
      ZT_ASSIGN_OR_RETURN(rng, reader->ReadRankBytes(rank, checkpoint::kRngArray));
      ZT_ASSIGN_OR_RETURN(const std::vector<c10::Device> cuda, runtime_->RngDevices());
      for (const c10::Device& d : cuda) {
        absl::StatusOr<std::vector<uint8_t>> bytes = reader->ReadRankBytes(rank, CudaRngArray(d));
        if (absl::IsNotFound(bytes.status())) continue;
        ZT_RETURN_IF_ERROR(bytes.status());
        cuda_rng.emplace_back(d, *std::move(bytes));
      }
    }
    // Each rank reads its share of the files whole; a damaged one is named down to its chunk.
    return reader->VerifyFileChecksums(rank, group_->world_size());
  }();
  local = WithPrefix(local, where);
  ZT_RETURN_IF_ERROR(AgreeAllOk(local, where));

  const checkpoint::Manifest& m = reader->manifest();
  try {
    c10::NoGradGuard no_grad;
    local = WithPrefix(ReadStateFrom(*reader), where);
    if (!rng.empty()) SetRngState(c10::Device(c10::kCPU), rng);
    for (const auto& [device, bytes] : cuda_rng) SetRngState(device, bytes);
  } catch (const c10::Error& e) {
    local = absl::InternalError(absl::StrCat(where, e.what_without_backtrace()));
  }
  if (local.ok() && scaler_ && m.has_loss_scaler()) {
    const checkpoint::LossScalerState& s = m.loss_scaler();
    local = scaler_->Restore(
        {s.scale(), s.iteration(), s.last_overflow_iteration(), s.hysteresis_left()});
  }
  optimizer_steps_ = m.optimizer_steps();
  skipped_steps_ = m.skipped_steps();
  // Saves happen only at accumulation boundaries; on another world size the accumulation steps
  // may differ, so count the boundaries passed in this run's units, not the saved micro steps.
  micro_steps_ = (optimizer_steps_ + skipped_steps_) * batch_.gradient_accumulation_steps;
  // Only a changed lr: an optimizer with an lr per parameter group (Muon's and Adam's) keeps its
  // groups' own until a schedule or the caller sets one for all.
  if (m.lr() != lr_) set_lr(m.lr());
  backward_pending_ = false;
  reducer_->Zero();
  // The gather is a collective: every rank runs it, or none does. Past the first agreement this
  // engine's state was overwritten, so a failure leaves it unusable until a load succeeds.
  broken_ = AgreeAllOk(local, where);
  if (!broken_.ok()) return broken_;
  broken_ = AgreeAllOk(store_->PublishUpdate(where), where);
  if (!broken_.ok()) return broken_;
  host_pool_->ReleaseCached();  // the load's sub-group and part buffers
  return std::map<std::string, std::string>(m.client_state().begin(), m.client_state().end());
}

absl::Status Engine::ReadStateFrom(checkpoint::CheckpointReader& reader) {
  const std::vector<MasterRun> runs = store_->MasterRuns();
  std::vector<std::string> arrays = {checkpoint::kMasterArray};
  for (const std::string& name : master_->optimizer().state_names()) arrays.push_back(name);
  offload::MemoryRoleScope role(offload::MemoryRole::kOptimizerStates);
  return master_->VisitAll(offload::Access::kWrite, [&](const MasterView& v) {
    const int64_t end = v.begin + v.numel;
    at::Tensor host = at::empty({std::min(kPieceNumel, v.numel)}, at::kFloat);
    for (size_t a = 0; a < arrays.size(); ++a) {
      // Padding stays zero; every real element is read, through the saved layout's offset of
      // the same parameter, so layouts with different buckets, segments or ranks all map.
      const at::Tensor to = master_->Array(v.arrays[a], v.numel);
      to.zero_();
      for (const MasterRun& run : runs) {
        const int64_t lo = std::max(run.master_offset, v.begin);
        const int64_t hi = std::min(run.master_offset + run.numel, end);
        for (int64_t p = lo; p < hi; p += kPieceNumel) {
          const int64_t n = std::min(kPieceNumel, hi - p);
          ZT_RETURN_IF_ERROR(reader.ReadFlat(
              arrays[a],
              reader.param_offset(run.param) + run.param_offset + (p - run.master_offset), n,
              host.data_ptr<float>()));
          const at::Tensor piece = to.narrow(0, p - v.begin, n);
          piece.copy_(host.narrow(0, 0, n));
          host_copies_.Count(host.narrow(0, 0, n), piece);
        }
      }
    }
    // Aliased, the master is the parameters themselves and this wrote them too.
    if (master_->aliases_params()) return absl::OkStatus();
    return store_->ParamsFromMaster(master_->Array(v.arrays[0], v.numel), v.begin);
  });
}

}  // namespace zerotrain::engine
