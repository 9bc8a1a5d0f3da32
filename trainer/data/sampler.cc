// The sampler's permutations (our own splitmix64 + Fisher-Yates, so the order does not depend on
// the standard library's shuffle), the sample stream over them, and the eval split's sharding.
#include "trainer/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::trainer {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

absl::StatusOr<DistributedSampler> DistributedSampler::Create(int64_t num_windows, int world_size,
                                                              int rank, int64_t micro_batch,
                                                              uint64_t seed) {
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler rank ", rank, " is not in [0, world_size ", world_size, ")"));
  }
  if (micro_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train_micro_batch_size_per_gpu must be positive, got ", micro_batch));
  }
  if (num_windows < world_size * micro_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the training split has ", num_windows, " windows, fewer than world_size ", world_size,
        " x train_micro_batch_size_per_gpu ", micro_batch, "; use more data or a smaller batch"));
  }
  return DistributedSampler(num_windows, world_size, rank, micro_batch, seed);
}

DistributedSampler::DistributedSampler(int64_t num_windows, int world_size, int rank,
                                       int64_t micro_batch, uint64_t seed)
    : num_windows_(num_windows),
      world_size_(world_size),
      rank_(rank),
      micro_batch_(micro_batch),
      seed_(seed) {}

void DistributedSampler::Shuffle(int64_t epoch) {
  order_.resize(num_windows_);
  std::iota(order_.begin(), order_.end(), 0);
  uint64_t state = seed_ ^ (0xd1b54a32d192ed03ULL * static_cast<uint64_t>(epoch + 1));
  for (int64_t i = num_windows_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(SplitMix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order_[i], order_[j]);
  }
  shuffled_epoch_ = epoch;
}

int64_t DistributedSampler::WindowAt(int64_t offset) {
  const int64_t at = position_.sample + offset;
  const int64_t epoch = position_.epoch + at / num_windows_;
  if (epoch != shuffled_epoch_) Shuffle(epoch);
  return order_[at % num_windows_];
}

std::vector<int64_t> DistributedSampler::NextWindows() {
  std::vector<int64_t> windows(micro_batch_);
  // At most one epoch change per call (micro_batch <= num_windows), so no permutation is redrawn
  // twice.
  for (int64_t i = 0; i < micro_batch_; ++i) windows[i] = WindowAt(rank_ * micro_batch_ + i);
  const int64_t next = position_.sample + samples_per_micro_step();
  position_.epoch += next / num_windows_;
  position_.sample = next % num_windows_;
  return windows;
}

Batch DistributedSampler::NextBatch(const Dataset& dataset) {
  return dataset.TrainBatch(NextWindows());
}

absl::Status DistributedSampler::Seek(const DataPosition& position) {
  if (position.epoch < 0 || position.sample < 0 || position.sample >= num_windows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("data position: sample ", position.sample, " of epoch ", position.epoch,
                     " is not within an epoch of the training split's ", num_windows_, " windows"));
  }
  position_ = position;
  return absl::OkStatus();
}

EvalBatches::EvalBatches(const Dataset& dataset, int world_size, int rank, int64_t micro_batch,
                         int64_t max_batches)
    : dataset_(dataset), world_size_(world_size), rank_(rank), micro_batch_(micro_batch) {
  const int64_t windows = dataset.NumEvalWindows();
  total_batches_ = (windows + micro_batch - 1) / micro_batch;
  int64_t used = max_batches > 0 ? std::min(total_batches_, max_batches) : total_batches_;
  per_rank_ = total_batches_ == 0 ? 0 : std::max<int64_t>(1, used / world_size);
}

bool EvalBatches::Next(Batch* batch) {
  if (next_ >= per_rank_) return false;
  const int64_t b = (next_ * world_size_ + rank_) % total_batches_;
  ++next_;
  const int64_t first = b * micro_batch_;
  const int64_t last = std::min(first + micro_batch_, dataset_.NumEvalWindows());
  std::vector<int64_t> windows(last - first);
  std::iota(windows.begin(), windows.end(), first);
  *batch = dataset_.EvalBatch(windows);
  return true;
}

}  // namespace zerotrain::trainer
