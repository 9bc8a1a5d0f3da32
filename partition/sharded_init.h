// ShardedInit: building a ZeRO stage 3 model without any rank ever holding all of it (the
// counterpart of deepspeed.zero.Init). LibTorch gives no hook into a module's constructor, so
// the model opts in: right after it builds a submodule it calls Partition(submodule), which
// broadcasts rank 0's values of the parameters in it (every rank then starts from one model),
// keeps this rank's slices of them and frees the full values, so memory peaks near one submodule
// rather than the model. Submodules small enough to stay whole (the persistence
// threshold) keep their values. Engine::Create at stage 3 (EngineOptions::sharded_init) then
// adopts the slices instead of slicing full values.
//
// With offload_param nvme the slices need not stay in memory either: after SpillTo each part is
// written to a swap file as it is cut (DeepSpeed's zero.Init(remote_device="nvme")), so building
// the model holds one submodule at a time and nothing of the shard.
//
// The slices are the ones ShardedParams would cut: a submodule's parameters form one segment of
// the engine's layout, and a segment's buckets depend only on its own parameters, the bucket
// size and the world size, so they can be cut before the rest of the model exists.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/comm.h"
#include "offload/pinned_host_pool.h"
#include "offload/swap_space.h"
#include "partition/stage3_options.h"

namespace torch::nn {
class Module;
}

namespace zerotrain::partition {

class ShardedInit {
 public:
  // `bucket_numel` must be what the engine will use: min(reduce_bucket_size,
  // allgather_bucket_size) (Engine::Stage3BucketNumel).
  ShardedInit(comm::ProcessGroup* group, int64_t bucket_numel, const Stage3Options& options)
      : group_(group), bucket_numel_(bucket_numel), options_(options) {}

  // Collective: every rank partitions the same submodules in the same order. Takes the trainable
  // parameters of the submodule and of every module inside it that no earlier call took.
  absl::Status Partition(torch::nn::Module& submodule);
  // The same for one module given as its own parameters (not its submodules'), for a module that
  // is not a LibTorch one (python/'s zero.Init); `name` goes into errors.
  absl::Status PartitionOwn(const std::string& name, const std::vector<at::Tensor>& own);

  // From now on each part goes to a swap file in a private directory under options.directory
  // as soon as it is cut (its I/O waited for up to `io_timeout`), and none stays in memory. Call
  // before the first Partition; an unusable directory fails here, naming it. The files go with
  // ReleaseShards.
  absl::Status SpillTo(const offload::SwapSpaceOptions& options,
                       absl::Duration io_timeout = absl::Minutes(5));

  struct Part {
    std::vector<const void*> params;           // TensorImpls, in the engine's order (reversed)
    std::vector<std::vector<int64_t>> shapes;  // their full shapes
    int64_t numel = 0;                         // this rank's slices, end to end
    at::Tensor shard;       // them, in memory; undefined once spilled or released
    std::string region;     // spilled: the swap region holding them
    bool released = false;  // adopted by an engine
  };
  // Copies a part's slices into `dst` (part.numel elements of its dtype, contiguous), from memory
  // or from its swap file; FailedPrecondition once released.
  absl::Status ReadPart(const Part& part, at::Tensor dst) const;
  // The part holding `param`, or null when it was not partitioned here (or stayed whole).
  const Part* PartOf(const at::Tensor& param) const;
  // The full shape of a parameter partitioned here (its tensor now holds nothing).
  std::vector<int64_t> FullShapeOf(const at::Tensor& param) const;
  int64_t bucket_numel() const { return bucket_numel_; }
  int64_t shard_bytes() const { return shard_bytes_; }      // slices held in memory, all parts
  int64_t spilled_bytes() const { return spilled_bytes_; }  // slices in swap files
  // Frees the slices (and removes the swap files) once an engine has adopted them
  // (Engine::Create does this), so they are not held twice for the rest of the run; shapes and
  // PartOf stay. A second engine built from this
  // ShardedInit then fails at Create saying so.
  void ReleaseShards();
  // The same for the part holding `param` alone, as soon as it is copied (a spilled part stays
  // until ReleaseShards).
  void ReleaseShardOf(const at::Tensor& param);

 private:
  absl::Status Spill(Part& part);  // to its swap region
  absl::Status WaitOrKeep(const offload::IoHandle& io, offload::HostBlock& block) const;

  comm::ProcessGroup* group_;
  int64_t bucket_numel_;
  Stage3Options options_;
  std::vector<Part> parts_;
  std::unordered_map<const void*, int> part_of_;  // TensorImpl -> index into parts_
  std::unordered_map<const void*, bool> seen_;    // every parameter Partition has taken
  int64_t persistent_numel_ = 0;
  int64_t shard_bytes_ = 0;
  int64_t spilled_bytes_ = 0;
  // SpillTo: where parts go, and the aligned host memory their transfers use.
  std::unique_ptr<offload::PinnedHostPool> spill_pool_;
  std::unique_ptr<offload::SwapSpace> spill_;
  absl::Duration io_timeout_ = absl::Minutes(5);
};

}  // namespace zerotrain::partition
