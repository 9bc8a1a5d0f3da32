// ReadEventFile: parses a TensorBoard event file back, checking every length and CRC; what the
// tests use to see that our files are well-formed (and a way to inspect a run without Python).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "monitor/tensorboard_event.pb.h"

namespace zerotrain::monitor {

// All events in `path`, in order. A bad length CRC, data CRC, truncated record or unparsable
// Event is a DataLoss error naming the file and the byte offset of the record.
absl::StatusOr<std::vector<tb::Event>> ReadEventFile(const std::string& path);

// The same, from the file's bytes (`name` is used in errors).
absl::StatusOr<std::vector<tb::Event>> ParseEventRecords(const std::string& bytes,
                                                         const std::string& name);

}  // namespace zerotrain::monitor
