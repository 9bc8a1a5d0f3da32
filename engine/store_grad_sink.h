// StoreGradSink: the reduced gradients of stage 2 and 3 with offload_optimizer nvme, streamed
// from the GradientReducer into the optimizer state's SubGroupStore (its gradient array) as
// backward produces them, so a rank keeps no gradient shard in memory (4 bytes per shard element:
// the largest single part of a ZeRO-Infinity rank's memory otherwise). On the way it sums what the
// step must know before it runs (overflow, sum of squares), from each sub-group's final values.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/status.h"
#include "offload/sub_group_store.h"
#include "partition/gradient_reducer.h"

namespace zerotrain::engine {

class StoreGradSink : public partition::GradShardSink {
 public:
  // The store (created with options.grads) arrives after the reducer that calls the sink: the
  // engine attaches it before the first backward.
  void Attach(offload::SubGroupStore* store) { store_ = store; }

  absl::Status Begin(bool accumulate) override;
  absl::Status Add(int64_t shard_offset, const at::Tensor& reduced) override;
  absl::Status Finish() override;

  // The last finished pass's [overflow, sum of squares], float64 on the host, as HostGradStats
  // gives them (grad_stats.h).
  const at::Tensor& stats() const { return stats_; }

 private:
  offload::SubGroupStore* store_ = nullptr;
  at::Tensor summing_;  // the pass under way
  at::Tensor stats_;
};

}  // namespace zerotrain::engine
