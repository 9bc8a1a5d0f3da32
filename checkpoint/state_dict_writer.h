// StateDictWriter: writes a state dict (an ordered map from parameter name to an fp32 tensor) in
// PyTorch's torch.save zip format, one tensor at a time, so memory stays near one tensor however
// large the model. Python reads it with torch.load (also with weights_only=True) and LibTorch
// with torch::pickle_load (a c10::Dict<std::string, at::Tensor> as a GenericDict). The file
// appears only when Finish succeeds (written under a temporary name, fsynced and renamed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::checkpoint {

class StateDictWriter {
 public:
  static absl::StatusOr<std::unique_ptr<StateDictWriter>> Open(const std::string& path);
  ~StateDictWriter();

  // Adds `name` -> a contiguous fp32 tensor of `shape` holding data[0 .. product(shape)).
  // The data is written to the file now; the caller may reuse its buffer afterwards.
  absl::Status Add(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  // Writes the pickled dict and the zip directory, then moves the file into place.
  absl::Status Finish();

  int64_t bytes_written() const;

 private:
  struct State;
  explicit StateDictWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace zerotrain::checkpoint
