// Where a GradientReducer's gradients wait for their reduction and where the reduced ones stay,
// chosen once from ReducerOptions::keeping (gradient_reducer.h): FlatGrads sums every micro-step
// in a full flat buffer that is reduced once per accumulation (ZeRO 0 and 1); ShardGrads stages
// each bucket and reduces it every backward into a gradient shard or a GradShardSink (ZeRO 2 and
// 3). The reducer owns the hooks, the order and the communication; these own the memory.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "partition/gradient_reducer.h"

namespace zerotrain::partition {

// Buffers of one backward: one whose reduction finished is reused for the next bucket, sparing
// the allocator a fresh multi-MiB block (and its page faults) per bucket. None survive Clear().
class ScratchBuffers {
 public:
  explicit ScratchBuffers(at::TensorOptions options) : options_(options) {}
  at::Tensor Take(int64_t numel, at::ScalarType dtype);
  void Return(at::Tensor t) { spare_.push_back(std::move(t)); }
  void Clear() { spare_.clear(); }

 private:
  at::TensorOptions options_;
  std::vector<at::Tensor> spare_;
};

class GradBuffers {
 public:
  // `params`, `sink` and `scratch` must outlive the result; `sink` is used with kShard only.
  static std::unique_ptr<GradBuffers> Create(const FlatParams* params, int rank,
                                             GradKeeping keeping, GradShardSink* sink,
                                             ScratchBuffers* scratch);
  virtual ~GradBuffers() = default;

  // Whether a backward that ends no accumulation reduces too.
  virtual bool reduces_every_backward() const = 0;
  // Whether whole reduced buckets are kept, which only an all-reduce gives.
  virtual bool keeps_whole_buckets() const = 0;
  // Whether each bucket's owned slice is a tensor of these buffers once reduced (for
  // ReducerOptions::on_owned_final).
  virtual bool holds_owned_slices() const = 0;
  virtual GradShardSink* sink() const { return nullptr; }

  // Drops what a failed backward left staged.
  virtual void BeginBackward() {}
  // A reducing backward starts / has reduced every bucket (`pass`: how that went).
  virtual absl::Status BeginPass() { return absl::OkStatus(); }
  virtual absl::Status FinishPass(absl::Status pass) { return pass; }

  // Parameter `param`'s gradient, flat, from its hook.
  virtual void Add(int param, const at::Tensor& grad) = 0;
  // The bucket's elements to reduce, each written: padding and parameters whose gradient did not
  // arrive (`arrived`, per parameter) are zero.
  virtual at::Tensor Input(int bucket, const std::vector<bool>& arrived) = 0;
  // `reduced`, the bucket's owned slice after the reduction (it may alias Input's), joins the
  // kept gradients; then Input's buffer is no longer needed.
  virtual absl::Status Keep(int bucket, const at::Tensor& reduced) = 0;

  virtual std::vector<GradSegment> Owned() const = 0;
  virtual GradSegment OwnedOf(int bucket) const = 0;
  virtual void Zero() = 0;
  virtual int64_t nbytes() const = 0;  // persistent between steps
};

}  // namespace zerotrain::partition
