// MasterState::Visit (master_state.h): the state as fp32 pieces whatever it is stored as. A bf16
// array is widened into a small fp32 buffer and rounded back to nearest even; an array kept for
// one parameter group only (compact: Muon's exp_avg_sq, which only Adam's parameters use) is
// scattered into its buffer run by run, with zeros between, and gathered back run by run.
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>

#include <algorithm>

#include "engine/master_state.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::Status MasterState::MakeCompact(const MasterStateInputs& in,
                                      const std::vector<float>& initial) {
  const std::vector<int> groups = optimizer_->state_array_groups();
  std::vector<MasterRun> runs = params_->MasterRuns();
  std::sort(runs.begin(), runs.end(), [](const MasterRun& a, const MasterRun& b) {
    return a.master_offset < b.master_offset;
  });
  compact_.assign(num_arrays(), at::Tensor());
  compact_runs_.assign(num_arrays(), {});
  for (int a = 1; a < num_arrays(); ++a) {
    if (store_index_[a] >= 0) continue;
    int64_t total = 0;
    for (const MasterRun& r : runs) {
      if (in.param_groups[r.param] != groups[a - 1]) continue;
      compact_runs_[a].push_back({r.master_offset, r.numel, total});
      total += r.numel;
    }
    try {
      // In host memory under offload (the state's runtime is then the host's).
      compact_[a] =
          at::full({total}, initial[a], at::TensorOptions(dtypes_[a]).device(runtime_->device()));
    } catch (const c10::Error& e) {
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating optimizer state array ", a, " (", total, " elements) on ",
                       runtime_->device().str(), ": ", e.what_without_backtrace()));
    }
  }
  return absl::OkStatus();
}

namespace {

// The part of [begin, begin + n) a run covers, as (offset into the piece, offset into the compact
// array, length); length 0 when they do not meet.
struct Overlap {
  int64_t in_piece = 0, in_compact = 0, numel = 0;
};

template <typename Run>
Overlap OverlapOf(const Run& r, int64_t begin, int64_t n) {
  const int64_t lo = std::max(r.master_offset, begin);
  const int64_t hi = std::min(r.master_offset + r.numel, begin + n);
  if (lo >= hi) return {};
  return {lo - begin, r.compact_offset + (lo - r.master_offset), hi - lo};
}

}  // namespace

at::Tensor MasterState::Stored(int a, const offload::SubGroupView& v, int64_t begin,
                               int64_t n) const {
  return at::from_blob(static_cast<char*>(v.arrays[store_index_[a]]) +
                           (begin - v.begin) * c10::elementSize(dtypes_[a]),
                       {n}, at::TensorOptions(dtypes_[a]).device(runtime_->device()));
}

void MasterState::Widen(int a, const offload::SubGroupView& v, int64_t begin, int64_t n,
                        const at::Tensor& wide) const {
  if (store_index_[a] >= 0) {
    wide.copy_(Stored(a, v, begin, n));
    return;
  }
  wide.zero_();
  for (const CompactRun& r : compact_runs_[a]) {
    const Overlap o = OverlapOf(r, begin, n);
    if (o.numel > 0) {
      wide.narrow(0, o.in_piece, o.numel).copy_(compact_[a].narrow(0, o.in_compact, o.numel));
    }
  }
}

// Rounded to nearest even where the array is bf16, as a tensor copy_ (and DeepSpeed's) rounds.
void MasterState::Narrow(int a, const offload::SubGroupView& v, int64_t begin, int64_t n,
                         const at::Tensor& wide) const {
  if (store_index_[a] >= 0) {
    Stored(a, v, begin, n).copy_(wide);
    return;
  }
  for (const CompactRun& r : compact_runs_[a]) {
    const Overlap o = OverlapOf(r, begin, n);
    if (o.numel > 0) {
      compact_[a].narrow(0, o.in_compact, o.numel).copy_(wide.narrow(0, o.in_piece, o.numel));
    }
  }
}

absl::Status MasterState::Visit(int64_t begin, int64_t end, offload::Access access,
                                const MasterVisitFn& fn) const {
  return store_->Visit(begin, end, access, [&](const offload::SubGroupView& v) {
    return VisitPieces(v, begin, end, access, fn);
  });
}

absl::Status MasterState::VisitPieces(const offload::SubGroupView& v, int64_t begin, int64_t end,
                                      offload::Access access, const MasterVisitFn& fn) const {
  const bool direct = std::all_of(widened_.begin(), widened_.end(),
                                  [](const at::Tensor& w) { return !w.defined(); });
  if (direct) {
    MasterView whole{v.begin, v.numel, {}, v.grads};
    for (int a = 0; a < num_arrays(); ++a) whole.arrays.push_back(v.floats(store_index_[a]));
    return fn(whole);
  }
  for (int64_t offset = 0; offset < v.numel; offset += kPieceNumel) {
    const int64_t n = std::min(kPieceNumel, v.numel - offset);
    const int64_t first = v.begin + offset;
    if (first + n <= begin || first >= end) continue;
    MasterView piece{first, n, {}, v.grads == nullptr ? nullptr : v.grads + offset};
    for (int a = 0; a < num_arrays(); ++a) {
      if (!widened_[a].defined()) {
        piece.arrays.push_back(v.floats(store_index_[a]) + offset);
        continue;
      }
      const at::Tensor wide = widened_[a].narrow(0, 0, n);
      if (access != offload::Access::kWrite) Widen(a, v, first, n, wide);
      piece.arrays.push_back(wide.data_ptr<float>());
    }
    ZT_RETURN_IF_ERROR(fn(piece));
    if (access == offload::Access::kRead) continue;
    for (int a = 0; a < num_arrays(); ++a) {
      if (widened_[a].defined()) Narrow(a, v, first, n, widened_[a].narrow(0, 0, n));
    }
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::engine
