// The engine's offload set-up: the host memory pool, the transfer stream and the swap spaces that
// offload_optimizer and offload_param ask for, and where stage 3's parameter shard goes. The
// master and the optimizer states themselves are MasterState's (master_state.h).
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/master_state.h"
#include "offload/pinned_host_pool.h"
#include "offload/sub_group_store.h"
#include "offload/swap_space.h"
#include "offload/transfer_stream.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::Status Engine::InitOffload() {
  const std::string where = absl::StrCat("Engine::Create on rank ", group_->rank(), ": ");
  const OptimizerOffloadOptions& off = options_.offload_optimizer;
  const ParamOffloadOptions& param = options_.offload_param;
  offload::PinnedHostPoolOptions po;
  // Page-locking speeds up copies between a device and host memory; a CPU engine makes none, so
  // pin_memory (on by default, as in DeepSpeed) costs it nothing and asks for nothing.
  po.use_cuda_host_alloc = runtime_->CopiesFromPinnedHost() &&
                           ((off.device != OffloadDevice::kNone && off.pin_memory) ||
                            (param.device != OffloadDevice::kNone && param.pin_memory));
  ZT_ASSIGN_OR_RETURN(offload::PinnedHostPool pool, offload::PinnedHostPool::Create(po));
  host_pool_ = std::make_unique<offload::PinnedHostPool>(std::move(pool));
  auto transfer = offload::MakeTransferStream(options_.device);
  if (!transfer.ok()) return WithPrefix(transfer.status(), where);
  transfer_ = std::move(*transfer);
  auto make_swap = [&](const std::string& path, const offload::AioOptions& aio, const char* field,
                       std::unique_ptr<offload::SwapSpace>* out) {
    offload::SwapSpaceOptions sw;
    sw.directory = path;
    sw.aio = aio;
    auto swap = offload::SwapSpace::Create(sw);
    if (!swap.ok()) {
      return WithPrefix(swap.status(), absl::StrCat(where, field, " \"", path, "\": "));
    }
    *out = std::move(*swap);
    return absl::OkStatus();
  };
  if (off.device == OffloadDevice::kNvme) {
    ZT_RETURN_IF_ERROR(make_swap(off.nvme_path, off.aio, "offload_optimizer.nvme_path", &swap_));
  }
  if (param.device == OffloadDevice::kNvme) {
    ZT_RETURN_IF_ERROR(
        make_swap(param.nvme_path, param.aio, "offload_param.nvme_path", &param_swap_));
  }
  return absl::OkStatus();
}

partition::ParamShardOptions Engine::ParamShardOptionsFor() const {
  const ParamOffloadOptions& param = options_.offload_param;
  partition::ParamShardOptions o;
  o.pool = host_pool_.get();
  o.transfer = transfer_.get();
  if (param.device == OffloadDevice::kCpu) o.device = partition::ParamDevice::kHost;
  if (param.device == OffloadDevice::kNvme) {
    o.device = partition::ParamDevice::kNvme;
    o.swap = param_swap_.get();
    o.region_prefix = absl::StrCat("rank", group_->rank(), ".param.");
    o.max_in_cpu = param.max_in_cpu;
  }
  return o;
}

absl::StatusOr<at::Tensor> Engine::MasterCopy() const {
  ZT_RETURN_IF_ERROR(WaitStreamOrdered("MasterCopy"));
  return master_->Copy();
}

}  // namespace zerotrain::engine
