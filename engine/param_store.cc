// The all-ranks agreement that the stores and the engine use after every step a single rank can
// fail, and the dtype names the optimizer kernels take.
#include "engine/param_store.h"

#include <algorithm>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

std::vector<MasterRun> ParamStore::MasterRuns() const {
  std::vector<MasterRun> runs;
  for (int i = 0; i < flat_params().num_params(); ++i) {
    for (const MasterRun& run : MasterRunsOf(i)) runs.push_back(run);
  }
  return runs;
}

std::vector<MasterRun> OwnedRuns(const partition::ShardLayout& layout, int param, int rank) {
  std::vector<MasterRun> runs;
  for (const partition::ParamPiece& piece : layout.PiecesOf(param)) {
    if (piece.rank == rank)
      runs.push_back({param, piece.param_offset, piece.numel, piece.shard_offset});
  }
  return runs;
}

void ConvertRuns(const at::Tensor& piece, int64_t begin, const std::vector<MasterRun>& runs,
                 const std::function<at::Tensor(const MasterRun&)>& out_of) {
  const int64_t end = begin + piece.numel();
  for (const MasterRun& run : runs) {
    const int64_t lo = std::max(run.master_offset, begin);
    const int64_t hi = std::min(run.master_offset + run.numel, end);
    if (lo >= hi) continue;
    const MasterRun cut{run.param, run.param_offset + (lo - run.master_offset), hi - lo, lo};
    // copy_ rounds to nearest even, as the optimizer kernels' params_out does, on any device.
    out_of(cut).copy_(piece.narrow(0, lo - begin, hi - lo));
  }
}

absl::Status BroadcastFromRankZero(comm::ProcessGroup* group, const at::Tensor& t) {
  const bool direct = t.is_contiguous() && t.scalar_type() != at::kBool;
  if (direct) return group->Broadcast(t, 0);
  at::Tensor wire = t.contiguous().to(t.scalar_type() == at::kBool ? at::kByte : t.scalar_type());
  ZT_RETURN_IF_ERROR(group->Broadcast(wire, 0));
  t.copy_(wire);
  return absl::OkStatus();
}

absl::Status AgreeAllOk(comm::ProcessGroup* group, const absl::Status& local,
                        const std::string& where) {
  const int world = group->world_size();
  at::Tensor mine = at::full({1}, local.ok() ? 0 : 1, at::kLong);
  at::Tensor all = at::empty({world}, at::kLong);
  absl::Status s = group->AllGather(mine, all);
  if (!local.ok()) return local;
  if (!s.ok()) return WithPrefix(s, where);
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (all.data_ptr<int64_t>()[r] != 0) failed.push_back(r);
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat(where, "rank(s) ", absl::StrJoin(failed, ","), " failed (see their errors)"));
}

}  // namespace zerotrain::engine
