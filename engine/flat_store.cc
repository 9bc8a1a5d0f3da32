// FlatStore: stages 0-2's flat buffer, its master runs (whole or this rank's slices), the
// all-gather of a sharded master after a step, and the whole master's checkpoint layout (one
// rank's, without the padding between dtype groups).
#include "engine/flat_store.h"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::StatusOr<std::unique_ptr<ParamStore>> FlatStore::Create(const ParamStoreInputs& in,
                                                              partition::GradKeeping keeping) {
  comm::ProcessGroup* group = in.group;
  const std::string where = absl::StrCat("Engine::Create on rank ", group->rank(), ": ");
  auto flat =
      partition::FlatParams::Create(in.params, group->world_size(), in.options->reduce_bucket_size);
  ZT_RETURN_IF_ERROR(AgreeAllOk(group, flat.status(), where));
  std::unique_ptr<FlatStore> store(
      new FlatStore(std::move(*flat), group, keeping, in.options->allgather_bucket_size));
  ZT_RETURN_IF_ERROR(store->BroadcastFlat());
  return std::unique_ptr<ParamStore>(std::move(store));
}

absl::Status FlatStore::BroadcastFlat() {
  // As DDP and deepspeed.initialize do: however each rank initialised its module, training starts
  // from rank 0's parameters, one collective per dtype group.
  try {
    c10::NoGradGuard no_grad;
    for (const at::Tensor& part : flat_.flat().parts()) {
      ZT_RETURN_IF_ERROR(BroadcastFromRankZero(group_, part));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Engine::Create: broadcasting rank 0's parameters: ",
                                            e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

int64_t FlatStore::master_numel() const {
  return whole_ ? flat_.layout().padded_numel() : flat_.layout().shard_numel();
}

std::vector<ModelRun> FlatStore::ModelRuns() const {
  std::vector<ModelRun> runs;
  if (whole_) {
    for (const partition::FlatGroup& g : flat_.groups())
      runs.push_back({g.begin, g.begin, g.numel});
    return runs;
  }
  const partition::ShardLayout& layout = flat_.layout();
  for (int k = 0; k < static_cast<int>(layout.buckets().size()); ++k) {
    const partition::LayoutBucket& b = layout.buckets()[k];
    runs.push_back({b.shard_offset, layout.OwnedBegin(k, group_->rank()), b.slice});
  }
  return runs;
}

std::vector<MasterRun> FlatStore::MasterRunsOf(int i) const {
  const partition::ShardLayout& layout = flat_.layout();
  if (whole_) return {{i, 0, layout.param_numel(i), layout.param_offset(i)}};
  return OwnedRuns(layout, i, group_->rank());
}

bool FlatStore::ModelCanBeMaster(c10::ScalarType master_dtype) const {
  // Only a whole master is laid out as the flat buffer.
  return whole_ && flat_.groups().size() == 1 && flat_.groups()[0].dtype == master_dtype;
}

absl::StatusOr<at::Tensor> FlatStore::ModelRange(int64_t begin, int64_t numel) const {
  return flat_.flat().Range(begin, numel);
}

at::Tensor FlatStore::ParamsOut(const partition::GradSegment& g) const {
  return flat_.flat().Range(g.flat_begin, g.numel);
}

absl::Status FlatStore::ForEachStepPiece(int64_t begin, int64_t end, bool aliased,
                                         const PieceFn& fn) {
  return fn(begin, end, at::Tensor());  // ParamsOut already points into the flat buffer
}

absl::Status FlatStore::PublishUpdate(const std::string& where) {
  return whole_ ? absl::OkStatus() : GatherParams();
}

absl::Status FlatStore::GatherParams() {
  const partition::ShardLayout& layout = flat_.layout();
  const int world = group_->world_size();
  // Each all-gather moves at most allgather_bucket_size elements: a bucket whole, or the same
  // columns of every rank's slice of it, which the [world, slice] view of the bucket makes a
  // [world, columns] tensor with contiguous rows (comm's row form of AllGather).
  const int64_t columns = std::max<int64_t>(1, allgather_bucket_size_ / world);
  std::vector<comm::Work> works;
  int64_t in_flight = 0;
  for (const partition::LayoutBucket& b : layout.buckets()) {
    const at::Tensor rows = flat_.flat().Range(b.begin, b.numel).view({world, b.slice});
    for (int64_t c = 0; c < b.slice; c += columns) {
      const int64_t n = std::min(columns, b.slice - c);
      if (!works.empty() && in_flight + n * world > allgather_bucket_size_) {
        ZT_RETURN_IF_ERROR(WaitOnStream(works));
        in_flight = 0;
      }
      // In place: this rank's row is its own updated slice (no copy). Narrowed to the whole
      // width, the view is the contiguous bucket itself.
      at::Tensor out = rows.narrow(1, c, n);
      works.push_back(group_->AllGatherAsync(out.select(0, group_->rank()), out));
      in_flight += n * world;
    }
  }
  return WaitOnStream(works);
}

absl::Status FlatStore::WaitOnStream(std::vector<comm::Work>& works) {
  absl::Status first;
  for (comm::Work& w : works) {
    absl::Status s = w.WaitOnStream();
    if (first.ok()) first = s;
    stream_ordered_.push_back(std::move(w));
  }
  works.clear();
  return first;
}

absl::Status FlatStore::WaitStreamOrdered() const {
  absl::Status s = comm::WaitAll(stream_ordered_);
  stream_ordered_.clear();
  return s;
}

absl::Status FlatStore::ParamsFromMaster(const at::Tensor& piece, int64_t begin) {
  // Into the flat buffer in place, at each run's place in its parameter.
  const partition::ShardLayout& layout = flat_.layout();
  ConvertRuns(piece, begin, MasterRuns(), [&](const MasterRun& run) {
    return flat_.flat().Range(layout.param_offset(run.param) + run.param_offset, run.numel);
  });
  return absl::OkStatus();
}

std::vector<int64_t> FlatStore::FullShape(int i) const {
  return flat_.params()[i].second.sizes().vec();
}

void FlatStore::AddParamBytes(ModelStateBytes* bytes) const {
  bytes->params = flat_.flat().nbytes();
}

std::vector<MasterSpan> FlatStore::CheckpointSpans(int64_t master_numel) const {
  if (!whole_) return {{0, master_numel}};
  // A whole master is the whole padded model: its 1-rank layout leaves out the padding that
  // starts each dtype group on a multiple of the world size (one group has none before its end).
  const partition::ShardLayout& layout = flat_.layout();
  if (flat_.groups().size() == 1) return {{0, layout.numel()}};
  std::vector<MasterSpan> out;
  for (int i = 0; i < layout.num_params(); ++i) {
    const int64_t begin = layout.param_offset(i);
    if (!out.empty() && out.back().begin + out.back().numel == begin) {
      out.back().numel += layout.param_numel(i);  // neighbours: one span, one write per piece
    } else {
      out.push_back({begin, layout.param_numel(i)});
    }
  }
  return out;
}

}  // namespace zerotrain::engine
