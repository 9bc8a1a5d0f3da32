// MuonGradients: which matrices need the other ranks and who orthogonalises each (learnt once), and
// each step, per batch, two visits of the optimizer state around the assembly and the
// orthogonalisation: the first computes
// each piece's next momentum and Nesterov blend, the second commits the momentum and overwrites
// the gradients, both where the matrix's blend is finite (a select, not a host sync).
#include "engine/muon_gradients.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/all.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/lerp.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::StatusOr<std::vector<MuonMatrix>> PickMuonMatrices(
    const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
    const UseMuonFn& use_muon) {
  std::vector<MuonMatrix> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!use_muon(names[i], shapes[i])) continue;
    if (shapes[i].size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Muon: parameter '", names[i], "' has ", shapes[i].size(),
                       " dimension(s); Muon steps matrices (two or more dimensions) only"));
    }
    int64_t cols = 1;
    for (size_t d = 1; d < shapes[i].size(); ++d) cols *= shapes[i][d];
    out.push_back({static_cast<int>(i), shapes[i][0], cols});
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MuonGradients>> MuonGradients::Create(
    const MuonGradientOptions& options, std::vector<MuonMatrix> matrices, ParamStore* params,
    MasterState* master, comm::ProcessGroup* group) {
  std::unique_ptr<MuonGradients> m(new MuonGradients());
  m->options_ = options;
  m->params_ = params;
  m->master_ = master;
  m->group_ = group;
  const int64_t count = static_cast<int64_t>(matrices.size());
  // How many ranks hold a piece of each matrix: one all-gather of this rank's flags.
  const at::Tensor mine = at::zeros({count}, at::kInt);
  for (int64_t i = 0; i < count; ++i) {
    for (const MasterRun& r : params->MasterRunsOf(matrices[i].param)) {
      m->pieces_.push_back({static_cast<int>(i), r.master_offset, r.numel, r.param_offset});
      mine[i] = 1;
    }
  }
  std::sort(m->pieces_.begin(), m->pieces_.end(),
            [](const Piece& a, const Piece& b) { return a.master_offset < b.master_offset; });
  at::Tensor holders = mine;
  if (params->grads_sharded()) {
    const at::Tensor all = at::zeros({count * group->world_size()}, at::kInt);
    ZT_RETURN_IF_ERROR(group->AllGather(mine, all));
    holders = all.view({group->world_size(), count}).sum(0);
  }
  // Split matrices in batches every rank forms alike; whole ones, where they are held.
  for (bool shared : {true, false}) {
    Batch batch;
    batch.shared = shared;
    batch.offsets.assign(count, -1);
    for (int64_t i = 0; i < count; ++i) {
      const bool split = params->grads_sharded() && holders[i].item<int>() > 1;
      if (split != shared || (!shared && mine[i].item<int>() == 0)) continue;
      const int64_t numel = matrices[i].rows * matrices[i].cols;
      if (!batch.matrices.empty() && batch.numel + numel > options.batch_numel) {
        m->batches_.push_back(batch);
        batch.matrices.clear();
        batch.offsets.assign(count, -1);
        batch.numel = 0;
      }
      batch.offsets[i] = batch.numel;
      batch.matrices.push_back(static_cast<int>(i));
      batch.numel += numel;
    }
    if (!batch.matrices.empty()) m->batches_.push_back(batch);
  }
  // A split matrix is orthogonalised by one rank, the one with the least work dealt so far
  // (products of rows x cols x min(rows, cols) elements), and its update summed to the others
  // (DeepSpeed's stage 3 deals them out in turn); a whole one by the rank that holds it.
  m->computes_.resize(count);
  std::vector<double> work(group->world_size(), 0.0);
  for (int64_t i = 0; i < count; ++i) {
    const bool split = params->grads_sharded() && holders[i].item<int>() > 1;
    if (!split) {
      m->computes_[i] = mine[i].item<int>() != 0;
      continue;
    }
    const auto least = std::min_element(work.begin(), work.end()) - work.begin();
    const MuonMatrix& x = matrices[i];
    work[least] += static_cast<double>(x.rows) * x.cols * std::min(x.rows, x.cols);
    m->computes_[i] = least == group->rank();
  }
  m->matrices_ = std::move(matrices);
  return m;
}

absl::Status MuonGradients::ForEachOverlap(const Batch& batch,
                                           const std::vector<partition::GradSegment>& grads,
                                           offload::Access access, const OverlapFn& fn) {
  int64_t begin = master_->numel(), end = 0;
  for (const Piece& p : pieces_) {
    if (batch.offsets[p.matrix] < 0) continue;
    begin = std::min(begin, p.master_offset);
    end = std::max(end, p.master_offset + p.numel);
  }
  if (begin >= end) return absl::OkStatus();
  return master_->Visit(begin, end, access, [&](const MasterView& v) -> absl::Status {
    const int64_t v_end = v.begin + v.numel;
    for (const Piece& p : pieces_) {
      const int64_t p_end = p.master_offset + p.numel;
      if (batch.offsets[p.matrix] < 0 || p_end <= v.begin || p.master_offset >= v_end) continue;
      for (const partition::GradSegment& g : grads) {
        const int64_t lo = std::max({p.master_offset, v.begin, g.shard_offset});
        const int64_t hi = std::min({p_end, v_end, g.shard_offset + g.numel});
        if (lo >= hi) continue;
        fn(p, master_->Array(v.arrays[1] + (lo - v.begin), hi - lo),
           g.grads.narrow(0, lo - g.shard_offset, hi - lo),
           batch.offsets[p.matrix] + p.param_offset + (lo - p.master_offset));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status MuonGradients::ApplyBatch(const Batch& batch,
                                       const std::vector<partition::GradSegment>& grads,
                                       double in_divisor, double out_scale) {
  const double beta = options_.momentum;
  // On the state's device: the batch's blends, and this rank's pieces' next momentum.
  const at::Tensor blend = master_->Array(nullptr, 0).new_zeros({batch.numel});
  const at::Tensor next = blend.new_zeros({batch.numel});
  ZT_RETURN_IF_ERROR(ForEachOverlap(
      batch, grads, offload::Access::kRead,
      [&](const Piece&, const at::Tensor& momentum, const at::Tensor& g, int64_t pos) {
        at::Tensor g32 = g.to(momentum.device(), at::kFloat);
        if (in_divisor != 1.0) g32 = g32.mul(1.0 / in_divisor);
        const at::Tensor m = at::lerp(momentum, g32, 1.0 - beta);
        next.narrow(0, pos, m.numel()).copy_(m);
        blend.narrow(0, pos, m.numel()).copy_(at::lerp(g32, m, beta));
      }));
  if (batch.shared) ZT_RETURN_IF_ERROR(group_->AllReduce(blend, comm::ReduceOp::kSum));
  // Per matrix in the batch: whether it is finite, and its update where this rank computes it
  // (zeros elsewhere, so that the sum over ranks gives every update bit for bit).
  const at::Tensor updates = blend.new_zeros({batch.numel});
  at::Tensor finite =
      at::empty({static_cast<int64_t>(matrices_.size())}, blend.options().dtype(at::kBool));
  for (int i : batch.matrices) {
    const MuonMatrix& x = matrices_[i];
    const at::Tensor u = blend.narrow(0, batch.offsets[i], x.rows * x.cols);
    finite[i].copy_(at::isfinite(u).all());
    if (!computes_[i]) continue;
    at::Tensor o = optim::MuonUpdate(u.view({x.rows, x.cols}), options_.ns_method).flatten();
    if (out_scale != 1.0) o = o * out_scale;
    updates.narrow(0, batch.offsets[i], o.numel()).copy_(o);
  }
  if (batch.shared) ZT_RETURN_IF_ERROR(group_->AllReduce(updates, comm::ReduceOp::kSum));
  return ForEachOverlap(
      batch, grads, offload::Access::kReadWrite,
      [&](const Piece& p, const at::Tensor& momentum, const at::Tensor& g, int64_t pos) {
        const at::Tensor ok = finite[p.matrix];
        momentum.copy_(at::where(ok, next.narrow(0, pos, momentum.numel()), momentum));
        const at::Tensor o = updates.narrow(0, pos, g.numel()).to(g.device(), g.scalar_type());
        g.copy_(at::where(ok.to(g.device()), o, g));
      });
}

absl::Status MuonGradients::Apply(const std::vector<partition::GradSegment>& grads,
                                  double in_divisor, double out_scale) {
  for (const partition::GradSegment& g : grads) {
    if (!g.grads.defined()) {
      return absl::FailedPreconditionError(
          "Muon: the gradients are in the optimizer's store (offload_optimizer nvme), which Muon "
          "does not read");
    }
  }
  c10::NoGradGuard no_grad;
  try {
    for (const Batch& batch : batches_) {
      ZT_RETURN_IF_ERROR(ApplyBatch(batch, grads, in_divisor, out_scale));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Muon: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::engine
