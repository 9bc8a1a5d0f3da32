// GradientReducer: collects the gradients backward produces into ShardLayout's buckets (through
// hooks on the parameters) and averages them across ranks bucket by bucket, in bucket order on
// every rank. What a rank keeps is chosen once (GradKeeping):
//   kWhole (ZeRO 0): all-reduce into a full flat gradient buffer;
//   kOwnedSlices (ZeRO 1): gradients accumulate in a full flat buffer; at the accumulation
//            boundary each bucket is reduce-scattered (or all-reduced) and this rank keeps its
//            owned slices;
//   kShard (ZeRO 2 and 3): every micro-step, each bucket is staged, reduce-scattered (or
//            all-reduced) and added into a gradient shard of shard_numel() elements; the staging
//            is then freed, so no full-size gradient buffer outlives the reduction. With a
//            GradShardSink the reducer keeps no shard at all: each reduced slice goes to the sink
//            (an NVMe store).
// A bucket's reduction starts from the hook of its last gradient: with overlap_comm it runs while
// backward goes on, without it the hook waits for it (DeepSpeed's order either way). At most one
// full bucket's worth is in flight (while the next fills, with overlap_comm). The hooks run after
// autograd accumulates each gradient (post-accumulate-grad hooks, one per parameter, which this
// class owns): they copy the gradient out and drop the parameter's .grad at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "comm/quantized_reduce_scatter.h"
#include "partition/flat_params.h"

namespace zerotrain::partition {

// A run of reduced gradients this rank owns, of one dtype group: where it lies in the rank's
// optimizer shard (with kWhole the "shard" is the whole flat buffer) and in the flat parameter
// buffer.
struct GradSegment {
  int64_t shard_offset = 0;
  int64_t flat_begin = 0;
  at::Tensor grads;  // 1-D, contiguous, the parameters' dtype; undefined with a GradShardSink
  int64_t numel = 0;
};

// kShard: where reduced gradients go when the reducer does not keep the shard. A backward that
// reduces is one pass: Begin, then Add for every bucket's owned slice in bucket order (so in
// increasing shard offset, each slice right after the previous), then Finish. `accumulate` is
// false on the first pass after construction or Zero(): the sink then replaces what it holds.
// Add's tensor (the parameters' dtype and device) is valid only during the call.
class GradShardSink {
 public:
  virtual ~GradShardSink() = default;
  virtual absl::Status Begin(bool accumulate) = 0;
  virtual absl::Status Add(int64_t shard_offset, const at::Tensor& reduced) = 0;
  virtual absl::Status Finish() = 0;
};

// Which reduced gradients a rank keeps (see the top of this file); the caller maps its ZeRO stage.
enum class GradKeeping { kWhole, kOwnedSlices, kShard };

struct ReducerOptions {
  GradKeeping keeping = GradKeeping::kWhole;
  bool overlap_comm = true;
  bool reduce_scatter = true;  // false: all-reduce, keep the owned part (DeepSpeed's knob)
  // kOwnedSlices and kShard: called for each bucket, in bucket order, once this rank's part of it
  // is final in the backward that ends an accumulation (its copy-out queued on the device stream),
  // while backward may still run: where the optimizer's copy of the gradients can start moving
  // (offload from a GPU). The segment is one of those OwnedGrads() returns.
  std::function<void(const GradSegment&)> on_owned_final;
  // kShard: the reducer keeps no gradient shard, OwnedGrads() gives undefined tensors, and
  // on_owned_final is not called. After a backward whose pass failed, the next one replaces. Not
  // owned; must outlive the reducer. Ignored unless kShard.
  GradShardSink* grad_sink = nullptr;
  // kShard, ZeRO++'s quantized gradients (qgZ): each bucket is averaged by the two-level INT8
  // exchange of comm/quantized_reduce_scatter.h over these groups instead of a reduce-scatter.
  // Both null: off. Not owned.
  comm::TwoLevelGroups quantized;
};

class GradBuffers;
class ScratchBuffers;

class GradientReducer {
 public:
  static absl::StatusOr<std::unique_ptr<GradientReducer>> Create(comm::ProcessGroup* group,
                                                                 const FlatParams* params,
                                                                 ReducerOptions options);
  ~GradientReducer();  // removes the hooks

  // Call right before a backward; `reduce` says whether this backward ends with the reduction
  // (the accumulation boundary; with kShard every backward reduces).
  void BeginBackward(bool reduce);
  // After backward: checks every parameter got a gradient (unused ones count as zero when
  // `ignore_unused`, otherwise the error names them), starts the remaining reductions, waits for
  // all of them and drops the parameters' own .grad tensors.
  absl::Status FinishBackward(bool ignore_unused);
  // The host's checks of the reductions FinishBackward only ordered the device stream after
  // (comm::Work::WaitOnStream): their errors and timeouts. Call before the host reads gradients
  // or results computed from them, at least once per optimizer step.
  absl::Status WaitStreamOrdered() const;

  // The reduced gradients this rank steps, valid after a reducing FinishBackward.
  std::vector<GradSegment> OwnedGrads() const;
  // Clears accumulated gradients after an optimizer step (or a skipped one).
  void Zero();
  // Bytes of gradient storage that persist between steps (none with a GradShardSink).
  int64_t grad_bytes() const;
  // kShard with a GradShardSink: the gradients are the sink's.
  bool sinks_grads() const;
  // Seconds FinishBackward spent launching and waiting for reductions after backward returned.
  double last_comm_seconds() const { return last_comm_seconds_; }

 private:
  GradientReducer(comm::ProcessGroup* group, const FlatParams* params, ReducerOptions options);
  void OnGrad(int param, const at::Tensor& grad);
  void LaunchReady();
  void Launch(int bucket);
  // Waits for the oldest reductions until at most `keep` are in flight, running their copy-outs.
  void Drain(size_t keep);

  comm::ProcessGroup* group_;
  const FlatParams* params_;
  ReducerOptions options_;
  std::vector<std::vector<int>> param_buckets_;  // buckets each parameter touches
  std::vector<int> bucket_param_count_;          // parameters with elements in each bucket
  int64_t largest_bucket_ = 0;                   // elements (a multiple of the world size)

  // Per backward.
  bool active_ = false;
  bool reduce_ = false;
  bool boundary_ = false;  // this backward ends an accumulation
  std::vector<bool> arrived_;
  std::vector<int> waiting_;  // parameters each bucket still waits for
  int next_bucket_ = 0;
  struct PendingReduction {
    int bucket = 0;
    comm::Work work;
    std::vector<std::function<absl::Status()>> after;  // copy-outs, once the work is done
    int64_t numel = 0;
  };
  std::deque<PendingReduction> pending_;
  mutable std::vector<comm::Work> stream_ordered_;  // waited on the stream, not yet on the host
  int64_t in_flight_numel_ = 0;
  absl::Status pending_error_;
  absl::Status hook_error_;
  double last_comm_seconds_ = 0;

  std::unique_ptr<ScratchBuffers> scratch_;
  std::unique_ptr<GradBuffers> grads_;  // chosen by options_.keeping
};

}  // namespace zerotrain::partition
