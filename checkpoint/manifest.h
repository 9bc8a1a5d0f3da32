// Reading and writing a checkpoint's manifest file: "ZTMANIF1", u32 format version, u64 payload
// length, u32 CRC32C of the payload, then the binary Manifest proto. The version sits outside the
// proto so that a newer writer is recognised as such before anything is parsed.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/manifest.pb.h"

namespace zerotrain::checkpoint {

// 2: the manifest records the run id, and its shard files their identity (shard_identity.h).
inline constexpr uint32_t kManifestFormatVersion = 2;

// An older `format_version` only for tests that write the formats older builds wrote.
std::string EncodeManifest(const Manifest& manifest,
                           uint32_t format_version = kManifestFormatVersion);
// `path` only names the source in errors.
absl::StatusOr<Manifest> DecodeManifest(const std::string& bytes, const std::string& path);

absl::Status WriteManifest(const std::string& path, const Manifest& manifest);  // crash-safe
absl::StatusOr<Manifest> ReadManifest(const std::string& path);

}  // namespace zerotrain::checkpoint
