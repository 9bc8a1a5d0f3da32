// EventFileWriter: TensorBoard event files written from C++ (no TensorFlow, no Python). Each
// record is TFRecord-framed: uint64 length, masked CRC32C of the length, the serialized Event,
// masked CRC32C of the data. The first Event carries file_version "brain.Event:2".
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "monitor/scalar.h"
#include "monitor/tensorboard_event.pb.h"

namespace zerotrain::monitor {

// One TFRecord: header, data and trailer as bytes.
std::string EncodeRecord(const std::string& data);

class EventFileWriter {
 public:
  // Creates `dir` if needed and the file events.out.tfevents.<unix_time>.<hostname>.<pid>.<n>
  // in it (pid and a per-process counter keep two writers from colliding), then writes the
  // file-version event.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event at `step` with a simple_value per scalar (stored as float, as TensorBoard does).
  // wall_time < 0 means now.
  absl::Status WriteScalars(int64_t step, absl::Span<const Scalar> scalars,
                            double wall_time = -1.0);
  // Appends one record and flushes it, so a crash loses at most the record being written.
  absl::Status WriteEvent(const tb::Event& event);

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

}  // namespace zerotrain::monitor
