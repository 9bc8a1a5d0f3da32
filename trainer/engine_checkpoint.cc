// Engine::SaveCheckpoint and Engine::LoadCheckpoint: every rank writes its slice of the fp32
// master weights and optimizer states (checkpoint/shard_file.h) plus its RNG state; rank 0 then
// writes the manifest and `latest`. Loading re-slices through the saved layout, so any world
// size and stage 0-2 can load any checkpoint of the same model (docs/CHECKPOINT.md).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "optim/precision.h"
#include "tools/status_macros.h"
#include "trainer/engine.h"

namespace zerotrain::trainer {
namespace {

using checkpoint::ArrayDType;

optim::DType OptimDtypeOf(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return optim::DType::kBFloat16;
    case at::kHalf: return optim::DType::kFloat16;
    default: return optim::DType::kFloat32;
  }
}

std::string ShapeText(const checkpoint::ParameterEntry& p) {
  return absl::StrCat("'", p.name(), "' [", absl::StrJoin(p.shape(), ", "), "] ", p.dtype());
}

checkpoint::ParameterEntry EntryOf(const std::string& name, const at::Tensor& t) {
  checkpoint::ParameterEntry p;
  p.set_name(name);
  for (int64_t d : t.sizes()) p.add_shape(d);
  p.set_dtype(c10::toString(t.scalar_type()));
  p.set_numel(t.numel());
  return p;
}

}  // namespace

absl::Status Engine::AgreeAllOk(const absl::Status& local, const std::string& where) {
  const int world = group_->world_size();
  at::Tensor mine = at::full({1}, local.ok() ? 0 : 1, at::kLong);
  at::Tensor all = at::empty({world}, at::kLong);
  absl::Status s = group_->AllGather(mine, all);
  if (!local.ok()) return local;
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(where, s.message()));
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (all.data_ptr<int64_t>()[r] != 0) failed.push_back(r);
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(where, "rank(s) ", absl::StrJoin(failed, ","),
                                         " failed (see their errors)"));
}

std::vector<std::pair<int64_t, int64_t>> Engine::MasterRanges(
    std::vector<int64_t>* master_offsets) const {
  const partition::ShardLayout& layout = flat_->layout();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  master_offsets->clear();
  if (options_.stage == 0) {
    ranges.emplace_back(0, layout.numel());
    master_offsets->push_back(0);
    return ranges;
  }
  for (int k = 0; k < static_cast<int>(layout.buckets().size()); ++k) {
    const partition::LayoutBucket& b = layout.buckets()[k];
    const int64_t begin = layout.OwnedBegin(k, group_->rank());
    const int64_t n = std::min(begin + b.slice, layout.numel()) - begin;
    if (n <= 0) continue;  // padding only
    ranges.emplace_back(begin, n);
    master_offsets->push_back(b.shard_offset);
  }
  return ranges;
}

absl::Status Engine::SaveCheckpoint(const std::string& dir, const std::string& tag_in,
                                    const std::map<std::string, std::string>& client_state) {
  const int rank = group_->rank();
  const std::string where = absl::StrCat("SaveCheckpoint on rank ", rank, ": ");
  const std::string tag = tag_in.empty() ? checkpoint::DefaultTag(optimizer_steps_) : tag_in;
  const std::string tag_dir = absl::StrCat(dir, "/", tag);
  absl::Status local = checkpoint::ValidateTag(tag);
  if (local.ok() && (backward_pending_ || micro_steps_ % batch_.gradient_accumulation_steps != 0)) {
    local = absl::FailedPreconditionError(absl::StrCat(
        "micro step ", micro_steps_, " is inside an accumulation window; save after the Step() "
        "that steps the optimizer (partial gradients are not saved)"));
  }
  auto states = optimizer_->state();
  if (local.ok() && !states.ok()) local = states.status();
  if (local.ok() && rank == 0) {
    std::error_code ec;
    const std::string manifest = absl::StrCat(tag_dir, "/", checkpoint::kManifestFileName);
    auto latest = checkpoint::ReadLatest(dir);
    if (latest.ok() && *latest == tag) {
      local = absl::AlreadyExistsError(absl::StrCat(
          "checkpoint ", tag_dir, " is the one ", dir, "/latest names; choose another tag or "
          "remove it"));
    } else if (std::filesystem::exists(manifest, ec)) {
      // A complete tag `latest` does not name: left by a save killed between its manifest and
      // `latest`, or an older run's. Unlisting it first means a crash while it is rewritten
      // leaves a tag without a manifest, which nothing loads, instead of a mix of old and new.
      if (!std::filesystem::remove(manifest, ec) || ec) {
        local = absl::InternalError(absl::StrCat("cannot replace ", manifest, ": ", ec.message()));
      } else {
        local = checkpoint::FsyncDirectory(tag_dir);
      }
    }
    if (local.ok() && (std::filesystem::create_directories(tag_dir, ec), ec)) {
      local = absl::InternalError(absl::StrCat("cannot create ", tag_dir, ": ", ec.message()));
    }
  }
  if (!local.ok()) local = absl::Status(local.code(), absl::StrCat(where, local.message()));
  ZT_RETURN_IF_ERROR(AgreeAllOk(local, where));

  // Stage 0 holds the whole master on every rank: rank 0 saves it as a 1-rank layout.
  const bool holds_state = options_.stage > 0 || rank == 0;
  const int64_t numel = options_.stage == 0 ? flat_->layout().numel() : master_.numel();
  checkpoint::WrittenFile written;
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    at::Tensor rng;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    checkpoint::ShardFileWriter writer;
    if (holds_state) {
      local = writer.Add(checkpoint::kMasterArray, ArrayDType::kFloat32, master_.data_ptr<float>(),
                         numel);
      for (const auto& [name, data] : *states) {
        if (local.ok()) local = writer.Add(name, ArrayDType::kFloat32, data, numel);
      }
    }
    if (local.ok()) local = writer.Add(checkpoint::kRngArray, ArrayDType::kBytes,
                                       rng.data_ptr<uint8_t>(), rng.numel());
    if (local.ok()) {
      auto w = writer.Write(absl::StrCat(tag_dir, "/", checkpoint::ShardFileName(rank)));
      if (w.ok()) written = *w;
      local = w.status();
    }
  } catch (const c10::Error& e) {
    local = absl::InternalError(e.what_without_backtrace());
  }
  if (!local.ok()) local = absl::Status(local.code(), absl::StrCat(where, local.message()));
  // Rank 0 needs every file's size and checksum for the manifest.
  const int world = group_->world_size();
  at::Tensor mine = at::tensor({local.ok() ? int64_t{0} : int64_t{1}, written.size,
                                static_cast<int64_t>(written.crc32c)}, at::kLong);
  at::Tensor all = at::empty({3 * world}, at::kLong);
  absl::Status gathered = group_->AllGather(mine, all);
  if (local.ok() && !gathered.ok()) local = gathered;
  ZT_RETURN_IF_ERROR(AgreeAllOk(local, where));

  if (rank == 0) {
    checkpoint::Manifest m;
    m.set_tag(tag);
    m.set_world_size(world);
    m.set_stage(options_.stage);
    m.set_precision(PrecisionName(options_.precision));
    std::vector<ParamSignature> signature;
    for (const auto& [name, p] : flat_->params()) {
      *m.add_params() = EntryOf(name, p);
      signature.push_back({name, p.sizes().vec(), c10::toString(p.scalar_type())});
    }
    const Fingerprint f = MakeFingerprint(options_, batch_, signature);
    if (!f.parts.empty()) m.set_options_fingerprint(f.parts[0].second);
    m.set_config_text(absl::StrCat("stage: ", options_.stage, "\nprecision: ",
                                   PrecisionName(options_.precision), "\noptimizer: ",
                                   optimizer_->name(), "\ntrain_batch_size: ",
                                   batch_.train_batch_size, "\ngradient_accumulation_steps: ",
                                   batch_.gradient_accumulation_steps, "\n"));
    m.set_layout_world_size(options_.stage == 0 ? 1 : world);
    m.set_bucket_numel(options_.reduce_bucket_size);
    const int64_t* v = all.data_ptr<int64_t>();
    for (int r = 0; r < world; ++r) {
      checkpoint::ShardFileEntry* e = m.add_files();
      e->set_name(checkpoint::ShardFileName(r));
      e->set_rank(r);
      e->set_size(v[3 * r + 1]);
      e->set_crc32c(static_cast<uint32_t>(v[3 * r + 2]));
      e->set_holds_state(options_.stage > 0 || r == 0);
    }
    m.set_optimizer(optimizer_->name());
    for (const auto& s : *states) m.add_state_arrays(s.first);
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
    // The manifest, then `latest`: a crash before either leaves `latest` on the previous tag.
    local = checkpoint::WriteManifest(absl::StrCat(tag_dir, "/", checkpoint::kManifestFileName), m);
    if (local.ok()) local = checkpoint::WriteLatest(dir, tag);
    if (!local.ok()) local = absl::Status(local.code(), absl::StrCat(where, local.message()));
  }
  return AgreeAllOk(local, where);
}


absl::Status Engine::CheckModelMatches(const checkpoint::CheckpointReader& reader) const {
  const checkpoint::Manifest& m = reader.manifest();
  const std::string what = absl::StrCat("the model differs from checkpoint ", reader.tag_dir(),
                                        "/", checkpoint::kManifestFileName, ": ");
  // dtypes are compared only when the precision is the same: the master is fp32 either way, so
  // an fp32 checkpoint may resume in bf16 and vice versa.
  const bool same_precision = m.precision() == PrecisionName(options_.precision);
  const int n = std::min(flat_->num_params(), m.params_size());
  for (int i = 0; i < n; ++i) {
    const checkpoint::ParameterEntry mine = EntryOf(flat_->name(i), flat_->params()[i].second);
    const checkpoint::ParameterEntry& saved = m.params(i);
    const bool shape_same = std::equal(mine.shape().begin(), mine.shape().end(),
                                       saved.shape().begin(), saved.shape().end());
    if (mine.name() != saved.name() || !shape_same ||
        (same_precision && mine.dtype() != saved.dtype())) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, "parameter #", i, " (in engine order) is ", ShapeText(saved),
          " in the checkpoint and ", ShapeText(mine), " in the model"));
    }
  }
  if (flat_->num_params() != m.params_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, "the checkpoint has ", m.params_size(), " parameters, the model ",
        flat_->num_params(), " (the first ", n, " agree)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> Engine::LoadCheckpoint(
    const std::string& dir, const std::string& tag) {
  const int rank = group_->rank();
  const std::string where = absl::StrCat("LoadCheckpoint on rank ", rank, ": ");
  // Everything is read into temporaries first, so a rank failing leaves every engine unchanged.
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  std::vector<std::pair<std::string, float*>> states;
  std::vector<at::Tensor> loaded;  // master, then one per optimizer state
  std::vector<uint8_t> rng;
  absl::Status local = [&]() -> absl::Status {
    ZT_ASSIGN_OR_RETURN(reader, checkpoint::CheckpointReader::Open(dir, tag));
    ZT_RETURN_IF_ERROR(CheckModelMatches(*reader));
    ZT_ASSIGN_OR_RETURN(states, optimizer_->state());
    const checkpoint::Manifest& m = reader->manifest();
    std::vector<std::string> want(m.state_arrays().begin(), m.state_arrays().end()), have;
    for (const auto& s : states) have.push_back(s.first);
    if (want != have) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", reader->tag_dir(), " holds optimizer states [", absl::StrJoin(want, ", "),
          "] (", m.optimizer(), "), this engine's ", optimizer_->name(), " has [",
          absl::StrJoin(have, ", "), "]"));
    }
    std::vector<int64_t> offsets;
    const auto ranges = MasterRanges(&offsets);
    std::vector<std::string> arrays = {checkpoint::kMasterArray};
    arrays.insert(arrays.end(), have.begin(), have.end());
    for (const std::string& a : arrays) {
      // Every real element is read below; only the padding past the last one needs zeros.
      at::Tensor t = at::empty({master_.numel()}, at::kFloat);
      int64_t covered = 0;
      for (size_t i = 0; i < ranges.size(); ++i) {
        covered = std::max(covered, offsets[i] + ranges[i].second);
      }
      t.narrow(0, covered, master_.numel() - covered).zero_();
      for (size_t i = 0; i < ranges.size(); ++i) {
        ZT_RETURN_IF_ERROR(reader->ReadFlat(a, ranges[i].first, ranges[i].second,
                                            t.data_ptr<float>() + offsets[i]));
      }
      loaded.push_back(t);
    }
    if (m.world_size() == group_->world_size()) {
      ZT_ASSIGN_OR_RETURN(rng, reader->ReadRankBytes(rank, checkpoint::kRngArray));
    }
    return absl::OkStatus();
  }();
  if (!local.ok()) local = absl::Status(local.code(), absl::StrCat(where, local.message()));
  ZT_RETURN_IF_ERROR(AgreeAllOk(local, where));

  const checkpoint::Manifest& m = reader->manifest();
  try {
    c10::NoGradGuard no_grad;
    if (master_aliases_params_) {
      master_.copy_(loaded[0]);  // fp32 stage 0: this writes the parameters themselves
    } else {
      master_ = loaded[0];  // same size and dtype; nothing else holds the old buffer
    }
    for (size_t i = 0; i < states.size(); ++i) {
      std::memcpy(states[i].second, loaded[i + 1].data_ptr<float>(), master_.numel() * 4);
    }
    if (!master_aliases_params_) {
      // The same fp32 -> bf16/fp16 rounding the optimizer kernels use for their params_out.
      const at::Tensor& flat = flat_->flat();
      auto* out = static_cast<char*>(flat.data_ptr());
      const optim::DType dt = OptimDtypeOf(flat.scalar_type());
      std::vector<int64_t> offsets;
      const auto ranges = MasterRanges(&offsets);
      for (size_t i = 0; i < ranges.size(); ++i) {
        optim::ConvertFromFloat(master_.data_ptr<float>() + offsets[i],
                                out + ranges[i].first * flat.element_size(), dt, ranges[i].second);
      }
    }
    if (!rng.empty()) {
      at::Tensor state = at::empty({static_cast<int64_t>(rng.size())}, at::kByte);
      std::memcpy(state.data_ptr<uint8_t>(), rng.data(), rng.size());
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
  } catch (const c10::Error& e) {
    local = absl::InternalError(absl::StrCat(where, e.what_without_backtrace()));
  }
  if (local.ok() && scaler_ && m.has_loss_scaler()) {
    const checkpoint::LossScalerState& s = m.loss_scaler();
    local = scaler_->Restore({s.scale(), s.iteration(), s.last_overflow_iteration(),
                              s.hysteresis_left()});
  }
  micro_steps_ = m.micro_steps();
  optimizer_steps_ = m.optimizer_steps();
  skipped_steps_ = m.skipped_steps();
  set_lr(m.lr());
  backward_pending_ = false;
  reducer_->Zero();
  if (local.ok() && options_.stage > 0) local = GatherParams();
  ZT_RETURN_IF_ERROR(AgreeAllOk(local, where));
  return std::map<std::string, std::string>(m.client_state().begin(), m.client_state().end());
}

}  // namespace zerotrain::trainer
