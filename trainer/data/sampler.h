// DistributedSampler: which training windows each rank reads at each micro-step. Every epoch is
// a permutation of all windows, a function of (seed, epoch) only; micro-step s hands the
// world_size * micro_batch windows at [s * W * B, (s + 1) * W * B) of that permutation out in
// rank order, so ranks read disjoint windows, an epoch visits each window at most once, and the
// whole sequence is reproducible from the seed and resumable from position().
// EvalBatches: the held-out split, sharded over ranks in a fixed order.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/token_dataset.h"

namespace zerotrain::trainer {

class DistributedSampler {
 public:
  // Errors when an epoch cannot give every rank one micro-batch (num_windows < W * B) or an
  // argument is out of range, naming it.
  static absl::StatusOr<DistributedSampler> Create(int64_t num_windows, int world_size, int rank,
                                                   int64_t micro_batch, uint64_t seed);

  // This rank's next micro_batch window indices; advances position() by one.
  std::vector<int64_t> NextWindows();
  // The same, gathered from the dataset's training split.
  Batch NextBatch(const TokenDataset& dataset);

  // Micro-steps taken since the start (equal on every rank): store it in a checkpoint and Seek()
  // to it to continue with exactly the batches that would have come next.
  int64_t position() const { return position_; }
  void Seek(int64_t position);

  int64_t epoch() const { return position_ / steps_per_epoch_; }
  // Micro-steps per epoch; the num_windows % (W * B) windows left over differ every epoch.
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  DistributedSampler(int64_t num_windows, int world_size, int rank, int64_t micro_batch,
                     uint64_t seed);
  void Shuffle(int64_t epoch);

  int64_t num_windows_;
  int world_size_;
  int rank_;
  int64_t micro_batch_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
  int64_t position_ = 0;
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
  EvalBatches(const TokenDataset& dataset, int world_size, int rank, int64_t micro_batch,
              int64_t max_batches);
  // False when this rank's share is done; Reset() starts over.
  bool Next(Batch* batch);
  void Reset() { next_ = 0; }
  int64_t batches_per_rank() const { return per_rank_; }

 private:
  const TokenDataset& dataset_;
  int world_size_, rank_;
  int64_t micro_batch_, total_batches_, per_rank_, next_ = 0;
};

}  // namespace zerotrain::trainer
