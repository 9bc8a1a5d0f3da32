// DataPosition: how far a run has read its training data, in samples (windows), so that a run
// resumed on any number of ranks or micro-batch size continues with exactly the next unseen
// samples. It rides in a checkpoint's client state as data_epoch / data_sample; checkpoints
// written before those keys hold the micro-step count sampler_position instead, which
// DataPositionFromClientState converts.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::trainer {

struct DataPosition {
  int64_t epoch = 0;
  int64_t sample = 0;  // samples of this epoch's permutation consumed by all ranks together
  bool operator==(const DataPosition& o) const { return epoch == o.epoch && sample == o.sample; }
};

inline constexpr char kDataEpochKey[] = "data_epoch";
inline constexpr char kDataSampleKey[] = "data_sample";
// Written by earlier versions: micro-steps taken, each world_size * micro_batch samples, by a
// sampler whose epochs dropped the num_windows % (world_size * micro_batch) left-over windows.
inline constexpr char kLegacySamplerPositionKey[] = "sampler_position";

// Adds data_epoch and data_sample to `client_state`.
void PutDataPosition(const DataPosition& position,
                     std::map<std::string, std::string>* client_state);

// What a checkpoint written by an earlier version needs to convert its sampler_position: the
// samples one micro-step read at save (world_size * micro_batch, from the manifest).
struct LegacyDataLayout {
  int64_t samples_per_micro_step = 0;
};

// The position in `client_state` for a training split of `num_windows` windows. A legacy
// checkpoint's micro-step count is converted with `legacy` (an error when it is absent or bad);
// a missing, malformed or out-of-range value is an error naming the key and the value.
absl::StatusOr<DataPosition> DataPositionFromClientState(
    const std::map<std::string, std::string>& client_state, int64_t num_windows,
    const absl::StatusOr<LegacyDataLayout>& legacy);

// True when `client_state` holds only the legacy key (the caller then reads LegacyDataLayout).
bool HasOnlyLegacyDataPosition(const std::map<std::string, std::string>& client_state);

}  // namespace zerotrain::trainer
