// Event-file writing: record framing and the scalar Event.
#include "monitor/event_file_writer.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "monitor/masked_crc.h"
#include "monitor/output_dir.h"
#include "tools/status_macros.h"

namespace zerotrain::monitor {
namespace {

void AppendLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::atomic<int> writer_counter{0};

}  // namespace

std::string EncodeRecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(&out, data.size(), 8);
  AppendLittleEndian(&out, MaskedCrc32c(out.data(), 8), 4);
  out += data;
  AppendLittleEndian(&out, MaskedCrc32c(data.data(), data.size()), 4);
  return out;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& dir) {
  ZT_RETURN_IF_ERROR(MakeOutputDir(dir, "tensorboard_output_path"));
  const double now = WallTimeNow();
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(std::floor(now)), ".",
                   HostName(), ".", getpid(), ".", writer_counter.fetch_add(1));
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("tensorboard_output_path: cannot create '",
                                                      path, "': ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, file));
  tb::Event version;
  version.set_wall_time(now);
  version.set_step(0);
  version.set_file_version("brain.Event:2");
  ZT_RETURN_IF_ERROR(writer->WriteEvent(version));
  return writer;
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status EventFileWriter::WriteScalars(int64_t step, absl::Span<const Scalar> scalars,
                                           double wall_time) {
  tb::Event event;
  event.set_wall_time(wall_time < 0 ? WallTimeNow() : wall_time);
  event.set_step(step);
  tb::Summary* summary = event.mutable_summary();
  for (const Scalar& s : scalars) {
    tb::SummaryValue* v = summary->add_value();
    v->set_tag(s.name);
    v->set_simple_value(static_cast<float>(s.value));
  }
  return WriteEvent(event);
}

absl::Status EventFileWriter::WriteEvent(const tb::Event& event) {
  std::string data;
  if (!event.SerializeToString(&data)) {
    return absl::InternalError(absl::StrCat("cannot serialize an Event for '", path_, "'"));
  }
  const std::string record = EncodeRecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write to '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::monitor
