// Bucket-sharded layout arithmetic (see shard_layout.h).
#include "partition/shard_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerotrain::partition {

absl::StatusOr<ShardLayout> ShardLayout::Create(const std::vector<int64_t>& param_numels,
                                                int world_size, int64_t bucket_numel) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ShardLayout: world_size ", world_size));
  }
  if (bucket_numel < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ShardLayout: bucket_numel ", bucket_numel));
  }
  ShardLayout layout;
  layout.world_size_ = world_size;
  layout.bucket_numel_ = (bucket_numel + world_size - 1) / world_size * world_size;
  for (size_t i = 0; i < param_numels.size(); ++i) {
    if (param_numels[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShardLayout: parameter #", i, " has numel ", param_numels[i]));
    }
    layout.param_offsets_.push_back(layout.numel_);
    layout.param_numels_.push_back(param_numels[i]);
    layout.numel_ += param_numels[i];
  }
  layout.padded_numel_ = (layout.numel_ + world_size - 1) / world_size * world_size;
  int param = 0;
  for (int64_t begin = 0; begin < layout.padded_numel_; begin += layout.bucket_numel_) {
    LayoutBucket b;
    b.begin = begin;
    b.numel = std::min(layout.bucket_numel_, layout.padded_numel_ - begin);
    b.slice = b.numel / world_size;
    b.shard_offset = begin / world_size;
    // Skip parameters that end before this bucket (empty ones included).
    while (param < layout.num_params() &&
           layout.param_offsets_[param] + layout.param_numels_[param] <= begin) {
      ++param;
    }
    b.first_param = param;
    int end = param;
    while (end < layout.num_params() && layout.param_offsets_[end] < begin + b.numel) ++end;
    b.end_param = end;
    layout.buckets_.push_back(b);
  }
  return layout;
}

int ShardLayout::BucketOf(int64_t index) const {
  return static_cast<int>(index / bucket_numel_);
}

int ShardLayout::OwnerOf(int64_t index) const {
  const LayoutBucket& b = buckets_[BucketOf(index)];
  return static_cast<int>((index - b.begin) / b.slice);
}

int64_t ShardLayout::ShardOffsetOf(int64_t index) const {
  const LayoutBucket& b = buckets_[BucketOf(index)];
  return b.shard_offset + (index - b.begin) % b.slice;
}

int64_t ShardLayout::OwnedBegin(int bucket, int rank) const {
  const LayoutBucket& b = buckets_[bucket];
  return b.begin + rank * b.slice;
}

std::vector<ParamPiece> ShardLayout::PiecesOf(int i) const {
  std::vector<ParamPiece> pieces;
  const int64_t begin = param_offsets_[i];
  const int64_t end = begin + param_numels_[i];
  int64_t at = begin;
  while (at < end) {
    const int bucket = BucketOf(at);
    const LayoutBucket& b = buckets_[bucket];
    const int rank = static_cast<int>((at - b.begin) / b.slice);
    const int64_t slice_end = OwnedBegin(bucket, rank) + b.slice;
    ParamPiece piece;
    piece.rank = rank;
    piece.bucket = bucket;
    piece.flat_begin = at;
    piece.numel = std::min(end, slice_end) - at;
    piece.shard_offset = ShardOffsetOf(at);
    piece.param_offset = at - begin;
    pieces.push_back(piece);
    at += piece.numel;
  }
  return pieces;
}

}  // namespace zerotrain::partition
