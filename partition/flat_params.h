// FlatParams: a module's trainable parameters moved into flat buffers, one per dtype group
// (ShardLayout's flat order, each group starting a bucket of its own and padded to a multiple of
// the world size), each parameter re-pointed with set_data() at its view of its group's buffer,
// so autograd leaves, module references and optimizer identity stay the same while collectives
// and fused optimizer kernels see flat arrays. A bucket never spans two groups, so every
// collective moves one dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "partition/shard_layout.h"

namespace zerotrain::partition {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Parameters [first_param, end_param), all of one dtype, in buckets [first_bucket, end_bucket):
// flat elements [begin, begin + numel), numel a multiple of the world size.
struct FlatGroup {
  at::ScalarType dtype = at::kFloat;
  int first_param = 0;
  int end_param = 0;
  int first_bucket = 0;
  int end_bucket = 0;
  int64_t begin = 0;
  int64_t numel = 0;
};

// A buffer over an index space cut into dtype groups (the flat buffer's, or a shard's, where
// group g covers its flat range divided by the world size), stored as one tensor per group.
class GroupedBuffer {
 public:
  GroupedBuffer() = default;
  // parts[g] holds elements [begins[g], begins[g] + parts[g].numel()).
  GroupedBuffer(std::vector<int64_t> begins, std::vector<at::Tensor> parts)
      : begins_(std::move(begins)), parts_(std::move(parts)) {}

  // Elements [begin, begin + numel), which must lie within one group: a view of its tensor.
  at::Tensor Range(int64_t begin, int64_t numel) const;
  const std::vector<at::Tensor>& parts() const { return parts_; }
  int64_t begin(int g) const { return begins_[g]; }
  bool defined() const { return !parts_.empty(); }
  int64_t nbytes() const;
  void Zero();

 private:
  std::vector<int64_t> begins_;
  std::vector<at::Tensor> parts_;
};

class FlatParams {
 public:
  // `params` are the trainable parameters in the order they should be laid out (the engine passes
  // them in reverse registration order, the order backward tends to produce their gradients).
  // They are grouped by dtype, groups in the order their dtype first appears and parameters in
  // the given order within a group; params() is that laid-out order. All must share one device;
  // values are copied into the buffers.
  static absl::StatusOr<FlatParams> Create(const NamedTensors& params, int world_size,
                                           int64_t bucket_numel);
  // The layout and parameter list only: no buffer, and the parameters are left as they are
  // (ZeRO stage 3, where no rank holds the whole flat buffer; see sharded_params.h). One dtype
  // only. `numels`, when given, are the parameters' element counts (stage 3 parameters
  // partitioned at construction hold none).
  static absl::StatusOr<FlatParams> Describe(const NamedTensors& params, int world_size,
                                             int64_t bucket_numel,
                                             const std::vector<int>& segment_starts,
                                             const std::vector<int64_t>& numels = {});

  const ShardLayout& layout() const { return layout_; }
  const std::vector<FlatGroup>& groups() const { return groups_; }
  // The parameters' values, padded_numel() elements in all; not defined() if Describe'd.
  const GroupedBuffer& flat() const { return flat_; }
  // New zero-filled buffers laid out like flat(), and like one rank's shard of it.
  GroupedBuffer NewFlat() const;
  GroupedBuffer NewShard() const;
  // The parameters' device with group g's dtype.
  at::TensorOptions options(int group = 0) const;
  at::ScalarType dtype(int param) const { return groups_[GroupOfParam(param)].dtype; }
  int GroupOfParam(int param) const;
  int GroupOfBucket(int bucket) const;
  const NamedTensors& params() const { return params_; }
  int num_params() const { return static_cast<int>(params_.size()); }
  const std::string& name(int i) const { return params_[i].first; }

  // Parameter i's elements within any buffer laid out like flat(), viewed in its shape.
  at::Tensor ViewOf(const GroupedBuffer& buffer, int i) const;

 private:
  FlatParams(ShardLayout layout) : layout_(std::move(layout)) {}
  GroupedBuffer NewBuffer(int divisor) const;

  ShardLayout layout_;
  std::vector<FlatGroup> groups_;
  GroupedBuffer flat_;
  c10::Device device_ = c10::kCPU;
  NamedTensors params_;
};

}  // namespace zerotrain::partition
