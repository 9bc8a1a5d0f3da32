// ZeroInit over partition's ShardedInit: the bucket size and the NVMe spill taken from the
// EngineOptions the Engine will be created with, so the two cannot disagree.
#include "engine/zero_init.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tensor_memory.h"
#include "partition/sharded_init.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

ZeroInit::ZeroInit(std::unique_ptr<partition::ShardedInit> init) : init_(std::move(init)) {}

ZeroInit::~ZeroInit() = default;

absl::StatusOr<std::unique_ptr<ZeroInit>> ZeroInit::Create(comm::ProcessGroup* group,
                                                           EngineOptions* options) {
  if (options->stage != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroInit: partitioned construction is for ZeRO stage 3; the options say "
                     "stage ",
                     options->stage));
  }
  // Before the model's tensors exist: the full values freed as each part is cut then go back to
  // the system. In glibc's heaps their holes were left behind by the small allocations between
  // them, and a rank's RSS rose by nearly a whole layer per layer (rank 0 held the model's bytes).
  InstallCpuTensorCounter();
  auto init =
      std::make_unique<partition::ShardedInit>(group, Stage3BucketNumel(*options), options->stage3);
  const ParamOffloadOptions& param = options->offload_param;
  if (param.device == OffloadDevice::kNvme) {
    ZT_RETURN_IF_ERROR(init->SpillTo({param.nvme_path, param.aio}));
  }
  options->sharded_init = init.get();
  return std::unique_ptr<ZeroInit>(new ZeroInit(std::move(init)));
}

absl::Status ZeroInit::Partition(torch::nn::Module& submodule) {
  return init_->Partition(submodule);
}

absl::Status ZeroInit::PartitionOwn(const std::string& name, const std::vector<at::Tensor>& own) {
  return init_->PartitionOwn(name, own);
}

}  // namespace zerotrain::engine
