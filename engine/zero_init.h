// ZeroInit: DeepSpeed's zero.Init for the Engine. At ZeRO stage 3 a program partitions its model
// across the ranks while it builds it, one submodule at a time, so that no rank ever holds the
// whole model; Engine::Create then adopts the parts instead of cutting a whole model. The caller
// needs neither partition/ nor offload/: the bucket size, the NVMe spill and the hand-over to
// the Engine follow from the EngineOptions it will create the Engine with.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine_options.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace zerotrain::comm {
class ProcessGroup;
}  // namespace zerotrain::comm

namespace zerotrain::engine {

class ZeroInit {
 public:
  // For `options` at stage 3 (InvalidArgument naming the stage otherwise): parts cut to the
  // bucket size Engine::Create will use, written to swap files under offload_param's nvme_path as
  // they are cut when the parameters are offloaded to NVMe (an unusable directory fails here).
  // Sets options->sharded_init; the ZeroInit must outlive the Engine created with `options`.
  // Installs the CPU tensor counter (tensor_memory.h), so that memory is counted and mapped as
  // the model is built, and a rank's RSS follows its parts rather than the freed whole values.
  static absl::StatusOr<std::unique_ptr<ZeroInit>> Create(comm::ProcessGroup* group,
                                                          EngineOptions* options);
  ~ZeroInit();

  // Collective: every rank passes the same submodules in the same order, each right after it is
  // built and initialised. Takes the trainable parameters of `submodule` and of every module
  // inside it that no earlier call took; whatever values they hold on rank 0 are the ones kept.
  absl::Status Partition(torch::nn::Module& submodule);
  // The same for one module given as its own parameters, in registration order (not those of
  // the modules inside it: pass each of them too, in the order Module::apply visits them), for a
  // module that is not a LibTorch one (python/'s zero.Init); `name` goes into errors.
  absl::Status PartitionOwn(const std::string& name, const std::vector<at::Tensor>& own);

 private:
  explicit ZeroInit(std::unique_ptr<partition::ShardedInit> init);
  std::unique_ptr<partition::ShardedInit> init_;
};

}  // namespace zerotrain::engine
