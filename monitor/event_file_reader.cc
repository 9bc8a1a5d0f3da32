// Event-file reading: TFRecord framing checked field by field.
#include "monitor/event_file_reader.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "monitor/masked_crc.h"

namespace zerotrain::monitor {
namespace {

uint64_t LoadLittleEndian(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

}  // namespace

absl::StatusOr<std::vector<tb::Event>> ParseEventRecords(const std::string& bytes,
                                                         const std::string& name) {
  std::vector<tb::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = absl::StrCat("'", name, "' record at byte ", at, ": ");
    if (bytes.size() - at < 12) return absl::DataLossError(where + "truncated header");
    const uint64_t length = LoadLittleEndian(bytes, at, 8);
    const uint32_t length_crc = static_cast<uint32_t>(LoadLittleEndian(bytes, at + 8, 4));
    if (MaskedCrc32c(bytes.data() + at, 8) != length_crc) {
      return absl::DataLossError(where + "length CRC mismatch");
    }
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) {
      return absl::DataLossError(absl::StrCat(where, "truncated data (length ", length, ")"));
    }
    const char* data = bytes.data() + at + 12;
    const uint32_t data_crc = static_cast<uint32_t>(LoadLittleEndian(bytes, at + 12 + length, 4));
    if (MaskedCrc32c(data, length) != data_crc) {
      return absl::DataLossError(where + "data CRC mismatch");
    }
    tb::Event event;
    if (!event.ParseFromArray(data, static_cast<int>(length))) {
      return absl::DataLossError(where + "not a parsable Event");
    }
    events.push_back(std::move(event));
    at += 12 + length + 4;
  }
  return events;
}

absl::StatusOr<std::vector<tb::Event>> ReadEventFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open event file '", path, "'"));
  std::ostringstream buf;
  buf << in.rdbuf();
  return ParseEventRecords(buf.str(), path);
}

}  // namespace zerotrain::monitor
