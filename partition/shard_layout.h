// ShardLayout: where every element of a flat parameter buffer lives across data-parallel ranks.
// The buffer is cut into buckets of `bucket_numel` elements (a multiple of the world size; the last
// bucket is padded up to one), and every bucket is split W ways: rank r owns slice r of every
// bucket. A bucket is then both the unit of gradient reduction (a plain reduce-scatter of the
// bucket hands each rank exactly its owned slice) and of the parameter all-gather, and a rank's
// owned slices, laid end to end, form its contiguous shard of shard_numel() elements.
// Segments (ZeRO stage 3): a run of parameters fetched together (one submodule's) may be made
// to start a bucket of its own, so that gathering it moves no neighbour's elements; the bucket
// ending before it is then padded to a multiple of the world size, and padding lies between
// parameters as well as at the end.
// Pure arithmetic: no LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::partition {

struct LayoutBucket {
  int64_t begin = 0;         // first flat element
  int64_t numel = 0;         // a multiple of the world size
  int64_t shard_offset = 0;  // where this bucket's owned slice starts in every rank's shard
  int first_param = 0;       // parameters overlapping the bucket: [first_param, end_param)
  int end_param = 0;
  int64_t slice = 0;  // numel / world size: what each rank owns of the bucket
};

// A contiguous run of one parameter's elements held by one rank.
struct ParamPiece {
  int rank = 0;
  int bucket = 0;
  int64_t flat_begin = 0;  // in the flat buffer
  int64_t numel = 0;
  int64_t shard_offset = 0;  // in that rank's shard
  int64_t param_offset = 0;  // in the parameter's own flattened elements
};

class ShardLayout {
 public:
  // Parameters are laid end to end in the given order; without segments there are no gaps and
  // padding lies only at the end. bucket_numel is rounded up to a multiple of world_size.
  // `segment_starts` are parameter indices (increasing, each in [1, params)) where a new bucket
  // must begin.
  static absl::StatusOr<ShardLayout> Create(const std::vector<int64_t>& param_numels,
                                            int world_size, int64_t bucket_numel,
                                            const std::vector<int>& segment_starts = {});

  int world_size() const { return world_size_; }
  int num_params() const { return static_cast<int>(param_offsets_.size()); }
  int64_t numel() const { return numel_; }                // real elements
  int64_t padded_numel() const { return padded_numel_; }  // flat buffer size
  int64_t bucket_numel() const { return bucket_numel_; }  // the largest bucket
  const std::vector<int>& segment_starts() const { return segment_starts_; }
  // Segment s is parameters [first, end) and buckets [first_bucket, end_bucket); one segment
  // covering everything when there are no segment starts.
  int num_segments() const { return static_cast<int>(segment_starts_.size()) + 1; }
  int SegmentFirstParam(int s) const;
  int SegmentEndParam(int s) const;
  int SegmentFirstBucket(int s) const { return segment_buckets_[s]; }
  int SegmentEndBucket(int s) const { return segment_buckets_[s + 1]; }
  // Segment s's flat range: its buckets end to end, padding included.
  int64_t SegmentBegin(int s) const { return buckets_[SegmentFirstBucket(s)].begin; }
  int64_t SegmentNumel(int s) const;
  int64_t shard_numel() const { return padded_numel_ / world_size_; }
  int64_t param_offset(int i) const { return param_offsets_[i]; }
  int64_t param_numel(int i) const { return param_numels_[i]; }
  const std::vector<LayoutBucket>& buckets() const { return buckets_; }

  // The rank that owns flat element `index`, and the element's position in that rank's shard.
  int OwnerOf(int64_t index) const;
  int64_t ShardOffsetOf(int64_t index) const;

  // Every piece of parameter i, in parameter order; the pieces cover it exactly once.
  std::vector<ParamPiece> PiecesOf(int i) const;
  // The flat range rank `rank` owns in bucket b: [begin, begin + slice).
  int64_t OwnedBegin(int bucket, int rank) const;

 private:
  ShardLayout() = default;
  int BucketOf(int64_t index) const;

  int world_size_ = 1;
  int64_t bucket_numel_ = 0;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  std::vector<int64_t> param_offsets_;
  std::vector<int64_t> param_numels_;
  std::vector<LayoutBucket> buckets_;
  std::vector<int> segment_starts_;
  std::vector<int> segment_buckets_;  // first bucket of each segment, then the bucket count
};

}  // namespace zerotrain::partition
