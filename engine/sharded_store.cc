// ShardedStore: stage 3's creation (broadcast, then partition), its forward/backward windows,
// the step over shard parts, the refresh of gathered copies, and loading into the shard.
#include "engine/sharded_store.h"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

// Rank 0's values for every parameter ShardedInit did not partition at construction (it
// broadcast rank 0's values then), so that sharding starts from the same model everywhere.
absl::Status BroadcastParams(const ParamStoreInputs& in) {
  try {
    c10::NoGradGuard no_grad;
    for (const auto& [name, p] : in.params) {
      const partition::ShardedInit* init = in.options->sharded_init;
      if (init != nullptr && init->PartOf(p) != nullptr) continue;
      ZT_RETURN_IF_ERROR(BroadcastFromRankZero(in.group, p.detach()));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Engine::Create: broadcasting rank 0's parameters: ",
                                            e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParamStore>> ShardedStore::Create(const ParamStoreInputs& in) {
  const std::string where = absl::StrCat("Engine::Create on rank ", in.group->rank(), ": ");
  ZT_RETURN_IF_ERROR(BroadcastParams(in));
  // Partitioning ends in a gather of the persistent segments, which can fail on one rank.
  auto sharded = partition::ShardedParams::Create(
      in.params, in.segment_starts, in.group, Stage3BucketNumel(*in.options), in.options->stage3,
      in.options->sharded_init, in.shard);
  ZT_RETURN_IF_ERROR(AgreeAllOk(in.group, sharded.status(), where));
  return std::unique_ptr<ParamStore>(new ShardedStore(std::move(*sharded), in.group));
}

std::vector<MasterRun> ShardedStore::MasterRunsOf(int i) const {
  return OwnedRuns(sharded_->layout(), i, group_->rank());
}

bool ShardedStore::ModelCanBeMaster(c10::ScalarType master_dtype) const {
  const partition::ParamShard& shard = sharded_->shard();
  return shard.dtype() == master_dtype && shard.options().device == partition::ParamDevice::kModel;
}

absl::StatusOr<at::Tensor> ShardedStore::ModelRange(int64_t begin, int64_t numel) const {
  return sharded_->shard().Read(begin, numel);
}

void ShardedStore::BeginForward() {
  // A forward whose predecessor had no backward (evaluation) ends that iteration here.
  if (sharded_->in_iteration()) (void)sharded_->EndIteration();
  sharded_->OpenWindow();
  sharded_->PrefetchFirst();
}

absl::Status ShardedStore::EndBackward(bool failed) {
  // Backward gathered parameters again as autograd read them; the iteration of the use order
  // ends with it.
  absl::Status released = sharded_->EndIteration();
  sharded_->CloseWindow();
  return failed ? absl::OkStatus() : released;
}

// Where the shard lives on NVMe, a step piece is its overlap with each part of the shard, so that
// one part at a time is in host memory. The kernels are elementwise, so how the shard is cut
// changes no bit.
absl::Status ShardedStore::ForEachStepPiece(int64_t begin, int64_t end, bool aliased,
                                            const PieceFn& fn) {
  const partition::ParamShard& shard = sharded_->shard();
  if (shard.options().device != partition::ParamDevice::kNvme) {
    return StepPiece(begin, end, aliased, fn);
  }
  for (int p = 0; p < shard.num_parts(); ++p) {
    const int64_t lo = std::max(begin, shard.part_begin(p));
    const int64_t hi = std::min(end, shard.part_begin(p) + shard.part_numel(p));
    if (lo < hi) ZT_RETURN_IF_ERROR(StepPiece(lo, hi, aliased, fn));
  }
  return absl::OkStatus();
}

absl::Status ShardedStore::StepPiece(int64_t lo, int64_t hi, bool aliased, const PieceFn& fn) {
  if (aliased) return fn(lo, hi, at::Tensor());
  ZT_ASSIGN_OR_RETURN(at::Tensor out, sharded_->shard().Read(lo, hi - lo));
  ZT_RETURN_IF_ERROR(fn(lo, hi, out));
  return sharded_->shard().Write(lo, out);
}

absl::Status ShardedStore::PublishUpdate(const std::string& where) {
  // Gathered copies are stale; persistent ones are gathered again. Agreed on, as a rank that
  // could not read its shard would leave the others' next gathers unpaired.
  return AgreeAllOk(group_, sharded_->Refresh(), where);
}

absl::Status ShardedStore::ParamsFromMaster(const at::Tensor& piece, int64_t begin) {
  // The shard is laid out as the master: a view of a resident shard converted in place, or, on
  // NVMe, one part's range at a time read, converted and written back (as a step does).
  const std::vector<MasterRun> runs = MasterRuns();
  return ForEachStepPiece(begin, begin + piece.numel(), /*aliased=*/false,
                          [&](int64_t lo, int64_t hi, const at::Tensor& out) {
                            ConvertRuns(piece.narrow(0, lo - begin, hi - lo), lo, runs,
                                        [&](const MasterRun& run) {
                                          return out.narrow(0, run.master_offset - lo, run.numel);
                                        });
                            return absl::OkStatus();
                          });
}

absl::Status ShardedStore::Pin(const std::vector<int>& params) {
  absl::Status s = sharded_->Pin(params);
  if (!s.ok()) sharded_->Unpin(params);
  return s;
}

void ShardedStore::AddParamBytes(ModelStateBytes* b) const {
  // The shard (unless offload_param moved it), and the persistent parameters every rank holds
  // whole; gathered copies come and go within a step (gather_stats()).
  const partition::ParamShard& shard = sharded_->shard();
  const int64_t elem = c10::elementSize(shard.dtype());
  const bool with_model = shard.options().device == partition::ParamDevice::kModel;
  b->params = ((with_model ? shard.numel() : 0) + sharded_->stats().persistent_numel) * elem;
  b->secondary_params = sharded_->secondary_capacity_numel() * elem;
  b->offloaded_host += shard.host_bytes();
  b->offloaded_nvme += shard.nvme_bytes();
}

}  // namespace zerotrain::engine
