// Manifest framing (see manifest.h).
#include "checkpoint/manifest.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/little_endian.h"

namespace zerotrain::checkpoint {
namespace {

constexpr char kMagic[8] = {'Z', 'T', 'M', 'A', 'N', 'I', 'F', '1'};
constexpr size_t kHeaderBytes = 24;

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("checkpoint manifest ", path, ": ", what));
}

}  // namespace

std::string EncodeManifest(const Manifest& manifest, uint32_t format_version) {
  Manifest m = manifest;
  m.set_format_version(format_version);
  std::string payload;
  m.SerializeToString(&payload);
  std::string out(kMagic, sizeof(kMagic));
  PutLittleEndian(&out, format_version, 4);
  PutLittleEndian(&out, payload.size(), 8);
  PutLittleEndian(&out, Crc32c(payload.data(), payload.size()), 4);
  return out + payload;
}

absl::StatusOr<Manifest> DecodeManifest(const std::string& bytes, const std::string& path) {
  if (bytes.size() < kHeaderBytes) {
    return Corrupt(path, absl::StrCat("truncated: ", bytes.size(), " bytes"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corrupt(path, "not a manifest (bad magic)");
  }
  const uint32_t version = static_cast<uint32_t>(GetLittleEndian(bytes.data() + 8, 4));
  if (version > kManifestFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint manifest ", path, ": format version ", version,
        " is newer than this build reads (", kManifestFormatVersion, "); use a newer zerotrain"));
  }
  if (version == 0) return Corrupt(path, "format version 0");
  const uint64_t length = GetLittleEndian(bytes.data() + 12, 8);
  if (length != bytes.size() - kHeaderBytes) {
    return Corrupt(path, absl::StrCat("payload of ", bytes.size() - kHeaderBytes,
                                      " bytes, header says ", length, " (truncated?)"));
  }
  const char* payload = bytes.data() + kHeaderBytes;
  if (Crc32c(payload, length) != static_cast<uint32_t>(GetLittleEndian(bytes.data() + 20, 4))) {
    return Corrupt(path, "checksum mismatch");
  }
  Manifest m;
  if (!m.ParseFromArray(payload, static_cast<int>(length))) {
    return Corrupt(path, "the payload does not parse");
  }
  if (m.format_version() != version) {
    return Corrupt(path, absl::StrCat("format version ", m.format_version(), " inside, ", version,
                                      " in the header"));
  }
  return m;
}

absl::Status WriteManifest(const std::string& path, const Manifest& manifest) {
  return WriteFileAtomically(path, EncodeManifest(manifest));
}

absl::StatusOr<Manifest> ReadManifest(const std::string& path) {
  auto bytes = ReadWholeFile(path);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("checkpoint manifest: ", bytes.status().message()));
  }
  return DecodeManifest(*bytes, path);
}

}  // namespace zerotrain::checkpoint
