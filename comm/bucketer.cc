// Bucketed gradient reduction (see bucketer.h).
#include "comm/bucketer.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerotrain::comm {

GradientBucketer::GradientBucketer(ProcessGroup* group, BucketOptions options)
    : group_(group), options_(options) {}

absl::Status GradientBucketer::Add(const at::Tensor& grad) {
  if (!grad.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucketer: tensor #", added_.size(), " is undefined"));
  }
  if (finished_) {  // a new round: drop the previous one's results and tensors
    done_.clear();
    added_.clear();
    finished_ = false;
  }
  const int64_t elem = static_cast<int64_t>(grad.element_size());
  const int64_t capacity = std::max<int64_t>(1, options_.bucket_bytes / elem);
  OpenBucket& bucket = open_[grad.scalar_type()];
  if (bucket.buffer.defined() && bucket.used + grad.numel() > bucket.buffer.numel()) {
    Launch(bucket);
  }
  if (!bucket.buffer.defined()) {
    const int64_t numel = PaddedNumel(std::max(capacity, grad.numel()), group_->world_size());
    bucket.buffer = at::empty({numel}, grad.options());
  }
  BucketEntry entry;
  entry.tensor_index = static_cast<int>(added_.size());
  entry.offset = bucket.used;
  entry.numel = grad.numel();
  bucket.buffer.narrow(0, bucket.used, grad.numel()).copy_(grad.reshape({-1}));
  bucket.used += grad.numel();
  bucket.entries.push_back(entry);
  added_.push_back(grad);
  return absl::OkStatus();
}

void GradientBucketer::Launch(OpenBucket& bucket) {
  const int world = group_->world_size();
  ReducedBucket reduced;
  reduced.entries = std::move(bucket.entries);
  reduced.numel = bucket.used;
  // Reduce a prefix padded to a multiple of the world size: shards are then views, not copies.
  const int64_t padded = PaddedNumel(bucket.used, world);
  at::Tensor flat = bucket.buffer.narrow(0, 0, padded);
  flat.narrow(0, bucket.used, padded - bucket.used).zero_();
  if (options_.mode == BucketOptions::Mode::kAllReduce) {
    reduced.result = flat;
    reduced.range = ShardRange{0, bucket.used};
    pending_.push_back(group_->AllReduceAsync(flat, options_.op));
  } else {
    reduced.result = at::empty({padded / world}, flat.options());
    reduced.range = ShardOf(padded, world, group_->rank());
    reduced.range.end = std::min(reduced.range.end, bucket.used);
    reduced.range.begin = std::min(reduced.range.begin, reduced.range.end);
    pending_.push_back(group_->ReduceScatterAsync(flat, reduced.result, options_.op));
  }
  done_.push_back(std::move(reduced));
  bucket = OpenBucket();
}

absl::Status GradientBucketer::Finish() {
  for (auto& [dtype, bucket] : open_) {
    if (bucket.used > 0) Launch(bucket);
  }
  open_.clear();
  absl::Status status = WaitAll(pending_);
  pending_.clear();
  finished_ = true;
  if (!status.ok() || options_.mode != BucketOptions::Mode::kAllReduce) return status;
  for (const ReducedBucket& b : done_) {
    for (const BucketEntry& e : b.entries) {
      at::Tensor& dst = added_[e.tensor_index];
      dst.copy_(b.result.narrow(0, e.offset, e.numel).view(dst.sizes()));
    }
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::comm
