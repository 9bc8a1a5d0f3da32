// DataPosition's client-state keys and the conversion of the micro-step positions earlier
// versions saved.
#include "trainer/data/data_position.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::trainer {
namespace {

absl::StatusOr<int64_t> ReadKey(const std::map<std::string, std::string>& client_state,
                                const char* key) {
  auto it = client_state.find(key);
  if (it == client_state.end()) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no ", key));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint's ", key, " is \"", it->second, "\", not a count"));
  }
  return value;
}

}  // namespace

void PutDataPosition(const DataPosition& position,
                     std::map<std::string, std::string>* client_state) {
  (*client_state)[kDataEpochKey] = std::to_string(position.epoch);
  (*client_state)[kDataSampleKey] = std::to_string(position.sample);
}

bool HasOnlyLegacyDataPosition(const std::map<std::string, std::string>& client_state) {
  return client_state.count(kDataEpochKey) == 0 && client_state.count(kDataSampleKey) == 0 &&
         client_state.count(kLegacySamplerPositionKey) != 0;
}

absl::StatusOr<DataPosition> DataPositionFromClientState(
    const std::map<std::string, std::string>& client_state, int64_t num_windows,
    const absl::StatusOr<LegacyDataLayout>& legacy) {
  DataPosition p;
  if (HasOnlyLegacyDataPosition(client_state)) {
    auto micro_steps = ReadKey(client_state, kLegacySamplerPositionKey);
    if (!micro_steps.ok()) return micro_steps.status();
    if (!legacy.ok()) return legacy.status();
    const int64_t per_step = legacy->samples_per_micro_step;
    if (per_step <= 0 || per_step > num_windows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint's ", kLegacySamplerPositionKey, " counts micro-steps of ", per_step,
          " samples, which a training split of ", num_windows, " windows cannot have given"));
    }
    // The old sampler's epochs had whole micro-steps only.
    const int64_t steps_per_epoch = num_windows / per_step;
    p.epoch = *micro_steps / steps_per_epoch;
    p.sample = (*micro_steps % steps_per_epoch) * per_step;
    return p;
  }
  auto epoch = ReadKey(client_state, kDataEpochKey);
  if (!epoch.ok()) return epoch.status();
  auto sample = ReadKey(client_state, kDataSampleKey);
  if (!sample.ok()) return sample.status();
  if (*sample >= num_windows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint's ", kDataSampleKey, " is ", *sample, ", but the training split has ",
        num_windows, " windows (data.path or model.block_size differ from the saved run's)"));
  }
  p.epoch = *epoch;
  p.sample = *sample;
  return p;
}

}  // namespace zerotrain::trainer
