// Bucket-sharded layout arithmetic (see shard_layout.h).
#include "partition/shard_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerotrain::partition {
namespace {

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

}  // namespace

absl::StatusOr<ShardLayout> ShardLayout::Create(const std::vector<int64_t>& param_numels,
                                                int world_size, int64_t bucket_numel,
                                                const std::vector<int>& segment_starts) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ShardLayout: world_size ", world_size));
  }
  if (bucket_numel < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ShardLayout: bucket_numel ", bucket_numel));
  }
  const int n = static_cast<int>(param_numels.size());
  for (size_t i = 0; i < segment_starts.size(); ++i) {
    const int s = segment_starts[i];
    if (s < 1 || s >= n || (i > 0 && s <= segment_starts[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("ShardLayout: segment start #", i,
                                                     " is parameter ", s,
                                                     "; starts must increase within "
                                                     "[1, ",
                                                     n, ")"));
    }
  }
  ShardLayout layout;
  layout.world_size_ = world_size;
  layout.bucket_numel_ = RoundUp(bucket_numel, world_size);
  layout.segment_starts_ = segment_starts;
  std::vector<int64_t> segment_begin;  // flat index where each segment starts
  size_t next_start = 0;
  int64_t at = 0;
  for (int i = 0; i < n; ++i) {
    if (param_numels[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShardLayout: parameter #", i, " has numel ", param_numels[i]));
    }
    if (i == 0 || (next_start < segment_starts.size() && segment_starts[next_start] == i)) {
      if (i > 0) ++next_start;
      at = RoundUp(at, world_size);
      segment_begin.push_back(at);
    }
    layout.param_offsets_.push_back(at);
    layout.param_numels_.push_back(param_numels[i]);
    layout.numel_ += param_numels[i];
    at += param_numels[i];
  }
  if (segment_begin.empty()) segment_begin.push_back(0);
  layout.padded_numel_ = RoundUp(at, world_size);
  segment_begin.push_back(layout.padded_numel_);
  int param = 0;
  for (size_t s = 0; s + 1 < segment_begin.size(); ++s) {
    layout.segment_buckets_.push_back(static_cast<int>(layout.buckets_.size()));
    for (int64_t begin = segment_begin[s]; begin < segment_begin[s + 1];
         begin += layout.bucket_numel_) {
      LayoutBucket b;
      b.begin = begin;
      b.numel = std::min(layout.bucket_numel_, segment_begin[s + 1] - begin);
      b.slice = b.numel / world_size;
      b.shard_offset = begin / world_size;
      // Skip parameters that end before this bucket (empty ones included).
      while (param < n && layout.param_offsets_[param] + param_numels[param] <= begin) ++param;
      b.first_param = param;
      int end = param;
      while (end < n && layout.param_offsets_[end] < begin + b.numel) ++end;
      b.end_param = end;
      layout.buckets_.push_back(b);
    }
  }
  layout.segment_buckets_.push_back(static_cast<int>(layout.buckets_.size()));
  return layout;
}

int ShardLayout::SegmentFirstParam(int s) const { return s == 0 ? 0 : segment_starts_[s - 1]; }

int ShardLayout::SegmentEndParam(int s) const {
  return s + 1 < num_segments() ? segment_starts_[s] : num_params();
}

int64_t ShardLayout::SegmentNumel(int s) const {
  const LayoutBucket& last = buckets_[SegmentEndBucket(s) - 1];
  return last.begin + last.numel - SegmentBegin(s);
}

int ShardLayout::BucketOf(int64_t index) const {
  if (segment_starts_.empty()) return static_cast<int>(index / bucket_numel_);
  // Buckets are not all the same size once segments cut them; they are sorted by begin.
  auto it = std::upper_bound(buckets_.begin(), buckets_.end(), index,
                             [](int64_t i, const LayoutBucket& b) { return i < b.begin; });
  return static_cast<int>(it - buckets_.begin()) - 1;
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
