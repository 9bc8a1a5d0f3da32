// Crash-safe file writing: data goes to a temporary name in the target's directory, is fsynced,
// renamed over the target and the directory fsynced, so a reader (or a process restarted after a
// crash) sees either the old file or the complete new one, never a prefix.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zerotrain::checkpoint {

class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  ~AtomicFileWriter();  // removes the temporary file unless committed

  // Writes at the end, size().
  absl::Status Append(const void* data, int64_t n);
  // Writes at `offset` (a gap before it reads as zeros), for a file whose parts are written out
  // of order; size() grows to cover it. crc32c() then no longer describes the file: a caller
  // that writes out of order checksums the file itself.
  absl::Status WriteAt(int64_t offset, const void* data, int64_t n);
  // fsync, rename to the final path, fsync the directory.
  absl::Status Commit();

  int64_t size() const { return size_; }
  uint32_t crc32c() const { return crc_; }  // of everything appended
  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp, int fd)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  std::string path_, temp_;
  int fd_ = -1;
  int64_t size_ = 0;
  uint32_t crc_ = 0;
};

absl::Status WriteFileAtomically(const std::string& path, absl::string_view data);
absl::Status FsyncDirectory(const std::string& dir);
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
// The CRC32C of a whole file, read in 1 MiB pieces (a shard file may not fit in memory twice).
absl::StatusOr<uint32_t> FileCrc32c(const std::string& path);

// The name an AtomicFileWriter temporary ("<name>.tmp.<pid>.<n>") was to become, or "" when
// `file_name` is not one.
std::string TemporaryTarget(const std::string& file_name);
// Removes the temporaries directly in `dir` whose target name `owned` accepts: a process killed
// while writing leaves them behind. Only while nothing writes them. Returns how many it removed.
absl::StatusOr<int> RemoveTemporaries(const std::string& dir,
                                      const std::function<bool(const std::string&)>& owned);

}  // namespace zerotrain::checkpoint
