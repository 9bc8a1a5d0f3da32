// FlatParams: a module's trainable parameters moved into one contiguous buffer (ShardLayout's
// flat order, padded to a multiple of the world size), each parameter re-pointed with set_data()
// at its view of the buffer, so autograd leaves, module references and optimizer identity stay
// the same while collectives and fused optimizer kernels see one flat array.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "partition/shard_layout.h"

namespace zerotrain::partition {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class FlatParams {
 public:
  // `params` are the trainable parameters in the order they should be laid out (the engine passes
  // them in reverse registration order, the order backward tends to produce their gradients).
  // Every parameter must share one dtype and device; values are copied into the buffer.
  static absl::StatusOr<FlatParams> Create(const NamedTensors& params, int world_size,
                                           int64_t bucket_numel);
  // The layout and parameter list only: no buffer, and the parameters are left as they are
  // (ZeRO stage 3, where no rank holds the whole flat buffer; see sharded_params.h).
  // `numels`, when given, are the parameters' element counts (stage 3 parameters partitioned at
  // construction hold none).
  static absl::StatusOr<FlatParams> Describe(const NamedTensors& params, int world_size,
                                             int64_t bucket_numel,
                                             const std::vector<int>& segment_starts,
                                             const std::vector<int64_t>& numels = {});

  const ShardLayout& layout() const { return layout_; }
  const at::Tensor& flat() const { return flat_; }  // padded_numel() elements; none if Describe'd
  const at::TensorOptions& options() const { return options_; }  // the parameters' dtype, device
  const NamedTensors& params() const { return params_; }
  int num_params() const { return static_cast<int>(params_.size()); }
  const std::string& name(int i) const { return params_[i].first; }
  at::ScalarType dtype() const;

  // Parameter i's elements within any buffer laid out like flat(), viewed in its shape.
  at::Tensor ViewOf(const at::Tensor& buffer, int i) const;

 private:
  FlatParams(ShardLayout layout) : layout_(std::move(layout)) {}

  ShardLayout layout_;
  at::Tensor flat_;
  at::TensorOptions options_;
  NamedTensors params_;
};

}  // namespace zerotrain::partition
