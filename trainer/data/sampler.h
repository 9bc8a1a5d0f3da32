// DistributedSampler: which training windows each rank reads at each micro-step. The samples form
// one stream, the same for every world size and micro-batch: epoch 0's permutation of all
// windows, then epoch 1's, ..., each a function of (seed, epoch) only. Each micro-step takes the
// next world_size * micro_batch samples of the stream and hands them out in rank order (a
// micro-step may span two epochs), so ranks read disjoint windows, an epoch visits each window
// exactly once, and a run resumed from position() on any world size or micro-batch continues
// with exactly the next unseen samples.
// EvalBatches: the held-out split, sharded over ranks in a fixed order.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/data_position.h"
#include "trainer/data/dataset.h"

namespace zerotrain::trainer {

class DistributedSampler {
 public:
  // Errors when an epoch cannot give every rank one micro-batch (num_windows < W * B) or an
  // argument is out of range, naming it.
  static absl::StatusOr<DistributedSampler> Create(int64_t num_windows, int world_size, int rank,
                                                   int64_t micro_batch, uint64_t seed);

  // This rank's next micro_batch window indices; advances position() by world_size * micro_batch
  // samples.
  std::vector<int64_t> NextWindows();
  // The same, gathered from the dataset's training split.
  Batch NextBatch(const Dataset& dataset);

  // Samples consumed by all ranks together (equal on every rank): store it in a checkpoint and
  // Seek() to it, with any world size or micro-batch, to continue with the next unseen samples.
  DataPosition position() const { return position_; }
  // Errors when the sample lies beyond the epoch (a checkpoint of other data), naming both.
  absl::Status Seek(const DataPosition& position);

  int64_t epoch() const { return position_.epoch; }
  int64_t samples_per_micro_step() const { return world_size_ * micro_batch_; }

 private:
  DistributedSampler(int64_t num_windows, int world_size, int rank, int64_t micro_batch,
                     uint64_t seed);
  void Shuffle(int64_t epoch);
  // The window at `offset` samples past position_ in the stream.
  int64_t WindowAt(int64_t offset);

  int64_t num_windows_;
  int world_size_;
  int rank_;
  int64_t micro_batch_;
  uint64_t seed_;
  DataPosition position_;
  int64_t shuffled_epoch_ = -1;
  std::vector<int64_t> order_;
};

// The eval split in window order, micro-batch b going to rank b % world_size; at most
// max_batches batches in all (0 = the whole split). Every rank gets the same number of batches
// (the count is rounded down to a multiple of world_size, and at least one batch per rank, which
// wraps around when the split has fewer batches than ranks), so a per-batch collective cannot
// hang; average the per-rank mean losses across ranks for the eval loss. The last batch of the
// split may hold fewer than micro_batch windows.
class EvalBatches {
 public:
  EvalBatches(const Dataset& dataset, int world_size, int rank, int64_t micro_batch,
              int64_t max_batches);
  // False when this rank's share is done; Reset() starts over.
  bool Next(Batch* batch);
  void Reset() { next_ = 0; }
  int64_t batches_per_rank() const { return per_rank_; }

 private:
  const Dataset& dataset_;
  int world_size_, rank_;
  int64_t micro_batch_, total_batches_, per_rank_, next_ = 0;
};

}  // namespace zerotrain::trainer
