// Partitioning a model as it is built (see sharded_init.h).
#include "partition/sharded_init.h"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "partition/shard_layout.h"
#include "tools/status_macros.h"

namespace zerotrain::partition {

absl::Status ShardedInit::Partition(torch::nn::Module& submodule) {
  absl::Status status;
  // Each module's own parameters are one segment of the engine's layout, so each is a part.
  submodule.apply([&](torch::nn::Module& m) {
    if (status.ok()) status = PartitionOwn(m.name(), m.parameters(/*recurse=*/false));
  });
  return status;
}

absl::Status ShardedInit::PartitionOwn(const std::string& name,
                                       const std::vector<at::Tensor>& own) {
  const std::string where =
      absl::StrCat("ShardedInit::Partition(", name, ") on rank ", group_->rank(), ": ");
  std::vector<at::Tensor> params;
  for (const at::Tensor& p : own) {
    if (p.requires_grad() && seen_.emplace(p.unsafeGetTensorImpl(), true).second) {
      params.push_back(p);
    }
  }
  std::reverse(params.begin(), params.end());  // the engine lays parameters out in reverse
  if (params.empty()) return absl::OkStatus();
  try {
    c10::NoGradGuard no_grad;
    std::vector<int64_t> numels;
    int64_t total = 0;
    for (at::Tensor& p : params) {
      // Rank 0's values, as Engine::Create would broadcast them.
      at::Tensor values = p.detach().contiguous();
      ZT_RETURN_IF_ERROR(group_->Broadcast(values, 0));
      if (!values.is_same(p)) p.detach().copy_(values);
      numels.push_back(p.numel());
      total += p.numel();
    }
    // The same rule ShardedParams applies to the segment this will become.
    if (total <= options_.persistence_threshold &&
        persistent_numel_ + total <= options_.model_persistence_threshold) {
      persistent_numel_ += total;
      return absl::OkStatus();
    }
    ZT_ASSIGN_OR_RETURN(ShardLayout layout,
                        ShardLayout::Create(numels, group_->world_size(), bucket_numel_));
    Part part;
    // The shard of one submodule: even when it is spilled, it is cut in memory first.
    part.shard = at::zeros({layout.shard_numel()}, params.front().options().requires_grad(false));
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor p = params[i];
      const at::Tensor flat = p.detach().reshape({-1});
      for (const ParamPiece& piece : layout.PiecesOf(static_cast<int>(i))) {
        if (piece.rank != group_->rank()) continue;
        part.shard.narrow(0, piece.shard_offset, piece.numel)
            .copy_(flat.narrow(0, piece.param_offset, piece.numel));
      }
      part.params.push_back(p.unsafeGetTensorImpl());
      part.shapes.push_back(p.sizes().vec());
      p.set_data(at::empty({0}, p.options()));  // the full values go now
      part_of_[p.unsafeGetTensorImpl()] = static_cast<int>(parts_.size());
    }
    part.numel = part.shard.numel();
    if (spill_ != nullptr) {
      ZT_RETURN_IF_ERROR(Spill(part));
    } else {
      shard_bytes_ += part.shard.nbytes();
    }
    parts_.push_back(std::move(part));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(where, e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status ShardedInit::SpillTo(const offload::SwapSpaceOptions& options,
                                  absl::Duration io_timeout) {
  const std::string where = absl::StrCat("ShardedInit::SpillTo on rank ", group_->rank(), ": ");
  if (!parts_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(where, "call it before the first Partition (",
                                                      parts_.size(),
                                                      " part(s) already in memory)"));
  }
  ZT_ASSIGN_OR_RETURN(offload::PinnedHostPool pool, offload::PinnedHostPool::Create({}));
  absl::StatusOr<std::unique_ptr<offload::SwapSpace>> swap = offload::SwapSpace::Create(options);
  if (!swap.ok()) return WithPrefix(swap.status(), where);
  spill_pool_ = std::make_unique<offload::PinnedHostPool>(std::move(pool));
  spill_ = *std::move(swap);
  io_timeout_ = io_timeout;
  return absl::OkStatus();
}

// A transfer still running after its timeout uses `block`: it is leaked rather than handed back
// to the pool for the next part.
absl::Status ShardedInit::WaitOrKeep(const offload::IoHandle& io, offload::HostBlock& block) const {
  absl::Status s = io.Wait(io_timeout_);
  if (!io.done()) static_cast<void>(new offload::HostBlock(std::move(block)));
  return s;
}

// Through one pool block: the swap space needs 4 KiB-aligned host memory.
absl::Status ShardedInit::Spill(Part& part) {
  const int64_t bytes = static_cast<int64_t>(part.shard.nbytes());
  part.region = absl::StrCat("init.p", parts_.size());
  ZT_RETURN_IF_ERROR(spill_->Reserve(part.region, bytes));
  ZT_ASSIGN_OR_RETURN(offload::HostBlock block, spill_pool_->Allocate(bytes));
  at::from_blob(block.data(), {part.numel}, part.shard.options().device(at::kCPU))
      .copy_(part.shard);
  ZT_ASSIGN_OR_RETURN(offload::IoHandle io, spill_->SwapOut(part.region, block.data()));
  ZT_RETURN_IF_ERROR(WaitOrKeep(io, block));
  part.shard = at::Tensor();
  spilled_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status ShardedInit::ReadPart(const Part& part, at::Tensor dst) const {
  if (part.released) {
    return absl::FailedPreconditionError(
        "ShardedInit: the part's slices were adopted by an engine and released");
  }
  try {
    if (part.shard.defined()) {
      dst.copy_(part.shard);
      return absl::OkStatus();
    }
    const int64_t bytes = part.numel * static_cast<int64_t>(dst.element_size());
    ZT_ASSIGN_OR_RETURN(offload::HostBlock block, spill_pool_->Allocate(bytes));
    ZT_ASSIGN_OR_RETURN(offload::IoHandle io, spill_->SwapIn(part.region, block.data()));
    ZT_RETURN_IF_ERROR(WaitOrKeep(io, block));
    dst.copy_(at::from_blob(block.data(), {part.numel}, dst.options().device(at::kCPU)));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("ShardedInit: reading part '", part.region,
                                            "': ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

const ShardedInit::Part* ShardedInit::PartOf(const at::Tensor& param) const {
  auto it = part_of_.find(param.unsafeGetTensorImpl());
  return it == part_of_.end() ? nullptr : &parts_[it->second];
}

std::vector<int64_t> ShardedInit::FullShapeOf(const at::Tensor& param) const {
  const Part* part = PartOf(param);
  if (part == nullptr) return param.sizes().vec();
  const auto it = std::find(part->params.begin(), part->params.end(), param.unsafeGetTensorImpl());
  return part->shapes[it - part->params.begin()];
}

void ShardedInit::ReleaseShardOf(const at::Tensor& param) {
  const auto it = part_of_.find(param.unsafeGetTensorImpl());
  if (it == part_of_.end()) return;
  Part& part = parts_[it->second];
  // A spilled part costs no memory, and its file stays readable until ReleaseShards: an
  // Engine::Create that failed after reading it can be retried.
  if (!part.region.empty()) return;
  if (part.shard.defined()) shard_bytes_ -= static_cast<int64_t>(part.shard.nbytes());
  part.shard = at::Tensor();
  part.released = true;
}

void ShardedInit::ReleaseShards() {
  for (Part& part : parts_) {
    part.shard = at::Tensor();
    part.released = true;
  }
  shard_bytes_ = 0;
  spilled_bytes_ = 0;
  spill_.reset();  // removes the swap files
  spill_pool_.reset();
}

}  // namespace zerotrain::partition
