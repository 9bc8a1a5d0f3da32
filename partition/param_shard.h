// ParamShard: ZeRO stage 3's parameter shard (this rank's owned slices of every parameter, in the
// model's dtype) wherever offload_param puts it: with the model (one tensor), in host memory from
// a PinnedHostPool (one tensor, page-locked where possible), or on NVMe, one swap-file region per
// part (the shard is cut into parts, one per gathered segment), with up to max_in_cpu elements of
// parts kept in host memory instead. Everything that reads or writes the shard goes through Read
// and Write, so ShardedParams and the engine have one code path for all three.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "offload/pinned_host_pool.h"
#include "offload/swap_space.h"
#include "offload/transfer_stream.h"

namespace zerotrain::partition {

enum class ParamDevice { kModel, kHost, kNvme };  // offload_param none, cpu, nvme
const char* ParamDeviceName(ParamDevice d);       // "none", "cpu", "nvme"

struct ParamShardOptions {
  ParamDevice device = ParamDevice::kModel;
  offload::PinnedHostPool* pool = nullptr;  // kHost: the shard; kNvme: the swap buffers
  offload::SwapSpace* swap = nullptr;       // kNvme
  std::string region_prefix;                // kNvme: regions "<prefix>p<part>"
  // kNvme: parts are kept in host memory, in order, while their elements total at most this
  // (DeepSpeed's offload_param.max_in_cpu); the rest live only on NVMe.
  int64_t max_in_cpu = 0;
  absl::Duration io_timeout = absl::Minutes(5);
  // kHost/kNvme under a model on a device: the stream that copies parts from host memory onto
  // the device for their gathers (ShardedParams; the copies' fences gate the blocks' reuse).
  // Null: a synchronous copy on the current stream.
  offload::TransferStream* transfer = nullptr;
};

class ParamShard {
 public:
  // Where Create takes the values from, one part at a time and in order: fill(p, dst) writes part
  // p's elements into `dst` (1-D, contiguous, the part's length). So the caller never needs the
  // whole shard in memory at once: with kNvme, Create holds one part beside what it keeps.
  struct Source {
    int64_t numel = 0;
    at::TensorOptions options;  // the shard's dtype, and the model's device (kModel)
    std::function<absl::Status(int part, at::Tensor dst)> fill;
  };
  // Builds the shard where the options say: kModel as one tensor on the model's device (so Read
  // returns device memory there); kHost in a pool block; kNvme writes each swapped part to its
  // region (reserved here, so a full disk fails here) and keeps only the max_in_cpu parts.
  // `part_starts` are the first elements of the parts: strictly increasing, starting at 0, each
  // < numel. InvalidArgument names the option or value; pool and swap-space errors keep their
  // code with "ParamShard: " and the part in front; fill's errors come back as they are.
  static absl::StatusOr<std::unique_ptr<ParamShard>> Create(Source source,
                                                            std::vector<int64_t> part_starts,
                                                            const ParamShardOptions& options);
  // The same from the whole shard (1-D, contiguous); kModel keeps `values` itself.
  static absl::StatusOr<std::unique_ptr<ParamShard>> Create(at::Tensor values,
                                                            std::vector<int64_t> part_starts,
                                                            const ParamShardOptions& options);
  ~ParamShard();
  ParamShard(const ParamShard&) = delete;
  ParamShard& operator=(const ParamShard&) = delete;

  // Elements [begin, begin + numel) as a 1-D tensor of the shard's dtype. Resident (kModel,
  // kHost, or kNvme parts kept in host memory): a view into the shard, valid until the
  // ParamShard is destroyed. Otherwise a new tensor (a pool block, freed when the tensor is)
  // read from the swap files: the range may span parts. I/O errors name the region and file
  // (SwapSpace's message). InvalidArgument for a range outside [0, numel()].
  absl::StatusOr<at::Tensor> Read(int64_t begin, int64_t numel) const;
  // Copies `values` (1-D, the shard's dtype, any numel that fits) to [begin, begin + numel);
  // a view Read returned may be written back to itself (nothing is copied then). Parts only
  // partly covered are read first. Waits for its swap-outs before returning.
  absl::Status Write(int64_t begin, const at::Tensor& values);

  int64_t numel() const;
  at::ScalarType dtype() const;
  const ParamShardOptions& options() const;
  // Bytes this shard holds in host memory outside the model (kHost: the shard; kNvme: the parts
  // kept in host memory; transient Read copies not included) and in swap files (region bytes).
  int64_t host_bytes() const;
  int64_t nvme_bytes() const;
  int num_parts() const;
  // Part p's elements: [part_begin(p), part_begin(p) + part_numel(p)). Reading and writing a part
  // at a time keeps the host memory of a swapped shard to one part.
  int64_t part_begin(int p) const;
  int64_t part_numel(int p) const;

 private:
  struct Impl;
  explicit ParamShard(std::unique_ptr<Impl> impl);
  // Both Creates; `whole` (may be undefined) is the values kModel keeps as they are.
  static absl::StatusOr<std::unique_ptr<ParamShard>> Build(Source source,
                                                           std::vector<int64_t> part_starts,
                                                           const ParamShardOptions& options,
                                                           at::Tensor whole);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zerotrain::partition
