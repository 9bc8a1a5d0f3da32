// MasterState::Step: the ShardOptimizer over every sub-group of the state, in one pass, or, for
// an optimizer whose update needs sums over whole parameter tensors (tensor_sums() > 0, as
// LAMB's trust ratio), in two passes around the all-reduce of those sums.
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <optional>

#include "engine/master_state.h"
#include "engine/optim_dtype.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

// The part of segment s inside [begin, end), its pointers moved along; none when they do not
// overlap. Gradients the store keeps (null here) are found per sub-group, in Step.
std::optional<ShardSegment> Clip(const ShardSegment& s, int64_t begin, int64_t end) {
  const int64_t lo = std::max(s.offset, begin);
  const int64_t hi = std::min(s.offset + s.size, end);
  if (lo >= hi) return std::nullopt;
  ShardSegment c = s;
  c.offset = lo;
  c.size = hi - lo;
  if (s.grads != nullptr) {
    c.grads = static_cast<const char*>(s.grads) + (lo - s.offset) * optim::DTypeSize(s.grad_dtype);
  }
  if (s.params_out != nullptr) {
    c.params_out =
        static_cast<char*>(s.params_out) + (lo - s.offset) * optim::DTypeSize(s.params_out_dtype);
  }
  return c;
}

// The segments cut where this rank's runs of each parameter begin and end, each part pointing at
// its parameter's `width` sums (none without `sums`) and naming its group. What lies outside every
// run (padding) is left out: no parameter to update there.
std::vector<ShardSegment> CutAtParams(const std::vector<ShardSegment>& segments,
                                      std::vector<MasterRun> runs, int width, double* sums,
                                      const std::vector<int>& groups) {
  std::sort(runs.begin(), runs.end(), [](const MasterRun& a, const MasterRun& b) {
    return a.master_offset < b.master_offset;
  });
  std::vector<ShardSegment> out;
  for (const ShardSegment& s : segments) {
    const int64_t end = s.offset + s.size;
    // The first run that ends after the segment begins (runs are disjoint, in master order).
    auto r = std::upper_bound(
        runs.begin(), runs.end(), s.offset,
        [](int64_t at, const MasterRun& x) { return at < x.master_offset + x.numel; });
    for (; r != runs.end() && r->master_offset < end; ++r) {
      std::optional<ShardSegment> c = Clip(s, r->master_offset, r->master_offset + r->numel);
      if (!c) continue;
      if (sums != nullptr) c->tensor_sums = sums + static_cast<int64_t>(r->param) * width;
      c->param_group = groups.empty() ? 0 : groups[r->param];
      out.push_back(*c);
    }
  }
  return out;
}

}  // namespace

// The optimizer runs once per piece of every sub-group, as the store cuts it (the whole
// sub-group, or its overlap with each part of a shard on NVMe).
absl::Status MasterState::Step(int64_t step, double grad_scale,
                               const std::vector<ShardSegment>& segments) {
  auto shard_of = [&](const MasterView& v, int64_t begin, int64_t end) {
    ShardState shard;
    shard.runtime = runtime_;
    shard.begin = begin;
    shard.numel = end - begin;
    shard.master = v.arrays[0] + (begin - v.begin);
    for (size_t a = 1; a < v.arrays.size(); ++a) {
      shard.state.push_back(v.arrays[a] + (begin - v.begin));
    }
    return shard;
  };
  // Each segment's part inside [begin, end) of sub-group v; `out`: the low-precision copy of
  // [begin, end) when the store hands it out for the piece.
  auto inside = [](const std::vector<ShardSegment>& all, const MasterView& v, int64_t begin,
                   int64_t end, const at::Tensor& out) {
    std::vector<ShardSegment> parts;
    for (const ShardSegment& s : all) {
      std::optional<ShardSegment> c = Clip(s, begin, end);
      if (!c) continue;
      if (c->grads == nullptr) c->grads = v.grads + (c->offset - v.begin);
      if (s.params_out == nullptr && out.defined()) {
        c->params_out =
            static_cast<char*>(out.data_ptr()) + (c->offset - begin) * out.element_size();
        c->params_out_dtype = ToOptimDtype(out.scalar_type());
      }
      parts.push_back(*c);
    }
    return parts;
  };

  const int width = optimizer_->tensor_sums();
  std::vector<ShardSegment> stepped = segments;
  at::Tensor sums;
  if (width > 0) {
    sums =
        at::zeros({static_cast<int64_t>(params_->flat_params().num_params()) * width}, at::kDouble);
    stepped =
        CutAtParams(segments, params_->MasterRuns(), width, sums.data_ptr<double>(), param_groups_);
    // Pass 1 writes no parameter, so it visits the sub-groups without the store's pieces.
    const absl::Status summed = VisitWithGrads([&](const MasterView& v) {
      std::vector<ShardSegment> parts = inside(stepped, v, v.begin, v.begin + v.numel, {});
      for (ShardSegment& p : parts) p.params_out = nullptr;
      return optimizer_->AddTensorSums(step, grad_scale, shard_of(v, v.begin, v.begin + v.numel),
                                       parts);
    });
    // A rank that failed would leave the others waiting in the all-reduce.
    ZT_RETURN_IF_ERROR(AgreeAllOk(group_, summed, ""));
    // Where each rank holds a disjoint part of the master, a tensor's sums are spread over ranks.
    if (params_->grads_sharded()) {
      ZT_RETURN_IF_ERROR(group_->AllReduce(sums, comm::ReduceOp::kSum));
    }
  }
  if (width == 0 && optimizer_->param_groups() > 1) {
    stepped = CutAtParams(segments, params_->MasterRuns(), 0, nullptr, param_groups_);
  }
  // A piece the store hands out on another device than the state's (stage 3's shard on a GPU
  // under offload_optimizer) is written into a staging buffer and copied back before the store
  // writes the piece back (only stage 3 hands pieces out, and it has no ParamsOut segments, so
  // Publish copies this piece's buffer alone).
  return VisitWithGrads([&](const MasterView& v) {
    return params_->ForEachStepPiece(
        v.begin, v.begin + v.numel, aliases_params_,
        [&](int64_t lo, int64_t hi, const at::Tensor& out) -> absl::Status {
          at::Tensor written = out;
          if (out.defined()) {
            ZT_ASSIGN_OR_RETURN(written, staging_->Out(out));
          }
          ZT_RETURN_IF_ERROR(optimizer_->Step(step, grad_scale, shard_of(v, lo, hi),
                                              inside(stepped, v, lo, hi, written)));
          return written.is_same(out) ? absl::OkStatus() : staging_->Publish();
        });
  });
}

absl::Status MasterState::VisitWithGrads(const MasterVisitFn& fn) {
  if (!grads_in_store_) return VisitAll(offload::Access::kReadWrite, fn);
  return store_->VisitWithGrads(offload::Access::kReadWrite, [&](const offload::SubGroupView& v) {
    return VisitPieces(v, 0, numel_, offload::Access::kReadWrite, fn);
  });
}

}  // namespace zerotrain::engine
