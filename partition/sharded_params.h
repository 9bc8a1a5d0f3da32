// ShardedParams: ZeRO stage 3's parameters. Between uses each rank holds only its shard of every
// parameter (ShardLayout's owned slices, in the model's dtype); a parameter's tensor keeps its
// identity (autograd leaf, module references) but its storage holds no memory. Parameters are
// cut into segments, one per submodule, which are gathered whole: one all-gather per bucket into
// one buffer per segment, which the parameters' storages then point into (no copy). Segments
// whose elements total at most the persistence threshold stay gathered all the time.
//
// A segment is gathered when an operator first reads one of its parameters (gather_on_use.h)
// and, once the use order is known (fetch_order.h), ahead of use within the prefetch budget. It is
// released when execution moves to another segment unless it will be reused within the reuse
// distance, and the gathered elements alive are kept within max_live_numel (plus the segment in
// use when it alone is larger).
//
// Parameters may be read only inside a window (the engine opens one for its forward scope and
// Backward) or while pinned (GatheredParameters); elsewhere their shape is [0], as DeepSpeed's
// are, and reading one fails with a message naming it. Not thread-safe beyond one autograd
// thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "partition/fetch_order.h"
#include "partition/flat_params.h"
#include "partition/gather_on_use.h"
#include "partition/param_shard.h"
#include "partition/sharded_init.h"
#include "partition/stage3_options.h"

namespace zerotrain::partition {

struct GatherStats {
  int64_t live_numel = 0;       // gathered elements of non-persistent segments, now
  int64_t peak_live_numel = 0;  // the most at once since ResetPeak()
  int64_t persistent_numel = 0;
  int64_t gathers = 0;            // segment gathers started
  int64_t prefetches = 0;         // of which ahead of use
  int64_t secondary_gathers = 0;  // of which from hpZ's secondary copy, within the node
  int64_t secondary_numel = 0;    // hpZ's secondary copies held now
  int64_t order_departures = 0;
  double wait_seconds = 0;  // blocked on gathers
};

class ShardedParams : public GatherOnUseOwner {
 public:
  // Collective. `params` are in flat order, every rank's holding the same values (the engine
  // broadcasts rank 0's first); `segment_starts` cut them into segments (ShardLayout). With
  // `init`, segments partitioned at construction take their slices from it. The shard is built
  // in memory, then placed where `shard_options` say (offload_param), one part per segment.
  static absl::StatusOr<std::unique_ptr<ShardedParams>> Create(
      const NamedTensors& params, const std::vector<int>& segment_starts, comm::ProcessGroup* group,
      int64_t bucket_numel, const Stage3Options& options, ShardedInit* init = nullptr,
      const ParamShardOptions& shard_options = {});
  ~ShardedParams() override;

  const FlatParams& flat_params() const { return *flat_; }
  const ShardLayout& layout() const { return flat_->layout(); }
  // This rank's shard_numel() elements, the model's dtype, wherever offload_param put them.
  ParamShard& shard() const { return *shard_; }
  bool persistent(int segment) const { return segments_[segment].persistent; }
  int SegmentOf(int param) const { return segment_of_[param]; }
  const std::vector<int64_t>& FullShape(int param) const { return shapes_[param]; }
  GatherStats stats() const { return stats_; }
  // hpZ's secondary copies at their largest: 1/k of every gathered (non-persistent) segment.
  int64_t secondary_capacity_numel() const;
  void ResetPeak() { stats_.peak_live_numel = stats_.live_numel; }
  bool in_iteration() const { return current_ >= 0; }  // a segment was used since EndIteration

  // Windows nest; the first open gives parameters their full shape.
  void OpenWindow();
  void CloseWindow();
  // At the start of an iteration in a window: starts gathering the first segments the recorded
  // order will use (within the prefetch budget), so the first one is not waited for in full.
  void PrefetchFirst();
  // Ends an iteration of the use order: releases every non-persistent segment.
  absl::Status EndIteration();
  // The shard changed (optimizer step, loaded checkpoint, written-back parameters): drops every
  // gathered copy and gathers the persistent segments again. Collective.
  absl::Status Refresh();
  // Gathers the segments of these parameters and keeps them (full shape, readable, writable)
  // until Unpin. Collective.
  absl::Status Pin(const std::vector<int>& params);
  void Unpin(const std::vector<int>& params);
  // Copies a pinned (or persistent) parameter's full values into this rank's shard.
  absl::Status WriteBack(int param);

  void Use(const std::vector<int>& params) override;

 private:
  enum class State { kReleased, kInFlight, kResident };
  struct Segment {
    int64_t begin = 0, numel = 0;  // flat range, padded
    int64_t real_numel = 0;
    bool persistent = false;
    State state = State::kReleased;
    at::Tensor buffer;
    at::Tensor input;  // this rank's part, read from the shard, until the gather has finished
    // A part read from host memory for a gather on a device: the host copy and the fence of its
    // transfer onto the device (the host block may go back to its pool only after it).
    at::Tensor host_input;
    offload::Fence staged;
    std::vector<comm::Work> works;
    bool quantized = false;  // gathered through INT8 blocks: the values are not the shard's
    // hpZ: this rank's 1/k of the segment as last gathered from the shard, bucket by bucket;
    // undefined until then and after the shard changes.
    at::Tensor secondary;
    bool keep_secondary = false;       // the gather in flight is from the shard: keep 1/k of it
    bool secondary_quantized = false;  // the secondary was kept from a gather through INT8
    int pins = 0;
  };

  ShardedParams(comm::ProcessGroup* group, const Stage3Options& options)
      : group_(group), options_(options) {}
  absl::Status Init(const NamedTensors& params, ShardedInit* init,
                    const ParamShardOptions& shard_options);
  // Whether the part ShardedInit cut for segment s holds the same parameters, so its slices are
  // the segment's.
  absl::Status CheckPart(int s, const ShardedInit::Part& part) const;
  // Segment s's owned values into `dst` (its part of the shard being built): ShardedInit's slices
  // (then released, so they are never all held twice) or this rank's pieces of the full values.
  absl::Status FillSegment(int s, const NamedTensors& params, ShardedInit* init, at::Tensor dst);
  // A shard that cannot be read (an NVMe fault) still launches the gathers, with zeros, so the
  // ranks' collectives stay paired; the error is kept in failed_ and returned by Finish. `exact`
  // gathers in full precision even under quantize_weights (GatheredParameters).
  void StartGather(int segment, bool prefetch, bool exact = false);
  // Waits for its gather (on the device stream where the backend has one: the host checks are
  // made at EndIteration) and points its parameters into it.
  absl::Status Finish(int segment);
  // Hands the part's host copy to staged_hosts_, which drops it once its transfer has finished:
  // without waiting (`wait` false: the ones done), or waiting for each, at the end of an iteration.
  void ParkHostInput(Segment& seg);
  absl::Status DropStagedHosts(bool wait);
  absl::Status Release(int segment);
  // Releases other segments, farthest next use first, until `numel` more fit the live budget.
  absl::Status MakeRoom(int64_t numel, const std::vector<int>& keep);
  void Prefetch();
  absl::Status UseOne(int segment, const std::vector<int>& keep);
  void SetShapes(bool full);
  bool Readable(int segment) const;
  std::string Describe(int param) const;
  // hpZ: copies this rank's 1/k of a freshly gathered segment into its secondary.
  void KeepSecondary(Segment& seg, int segment);
  void DropSecondary(Segment& seg);

  comm::ProcessGroup* group_;
  std::unique_ptr<comm::ProcessGroup> secondary_group_;  // hpZ: this rank's k consecutive ranks
  Stage3Options options_;
  std::unique_ptr<FlatParams> flat_;
  std::unique_ptr<FetchOrder> order_;
  std::unique_ptr<ParamShard> shard_;
  std::vector<Segment> segments_;
  std::vector<int> segment_of_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<c10::Storage> storages_;    // per parameter; empty for persistent ones
  std::vector<at::Tensor> full_, empty_;  // per parameter: its two headers on that storage
  int windows_ = 0;
  int current_ = -1;  // the segment the last operator read
  absl::Status failed_;
  std::vector<comm::Work> stream_ordered_;  // finished gathers not yet waited for on the host
  std::vector<std::pair<at::Tensor, offload::Fence>> staged_hosts_;  // host parts being copied
  offload::TransferStream* transfer_ = nullptr;
  absl::Duration transfer_timeout_;
  GatherStats stats_;
};

}  // namespace zerotrain::partition
