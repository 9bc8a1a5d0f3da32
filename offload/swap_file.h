// SwapFile: one preallocated file of NVMe swap space, read and written synchronously in aligned
// pieces with full-length pread/pwrite loops. AsyncFileIO runs these calls on its threads.
//
// The whole size is allocated at creation (posix_fallocate), so a full disk fails there, at
// start-up, and not in the middle of a training step. The file is opened with O_DIRECT where the
// filesystem allows it: swapped optimizer state is read back once per step, so caching it would
// only evict memory the host needs. Where O_DIRECT is refused (EINVAL: tmpfs, some overlay and
// network filesystems) it falls back to buffered I/O and mode() says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zerotrain::offload {

// O_DIRECT's unit: offsets, sizes and buffer addresses of every transfer are multiples of it, in
// both modes, so code that works buffered also works direct.
inline constexpr int64_t kIoAlignment = 4096;

enum class IoMode { kDirect, kBuffered };
const char* IoModeName(IoMode mode);

class SwapFile {
 public:
  // Creates `path` (it must not exist) with `bytes` (> 0, a multiple of kIoAlignment)
  // preallocated. Errors name the file, the size and strerror; nothing is left behind on failure.
  static absl::StatusOr<std::unique_ptr<SwapFile>> Create(const std::string& path, int64_t bytes,
                                                          bool try_direct = true);

  // Closes and removes the file.
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  // Transfers exactly `bytes` at `offset`: all three and `buffer` aligned to kIoAlignment, the
  // range inside the file. A read that meets the end of the file (the file shrank) is DataLoss
  // naming the file, offset and sizes; the rest of the buffer is never zero-filled. Safe to call
  // from several threads at once (positional I/O on one descriptor).
  absl::Status Read(int64_t offset, void* buffer, int64_t bytes) const;
  absl::Status Write(int64_t offset, const void* buffer, int64_t bytes) const;

  // The checks Read/Write make before any I/O: alignment and bounds.
  absl::Status CheckRange(const char* op, int64_t offset, const void* buffer, int64_t bytes) const;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  IoMode mode() const { return mode_; }

 private:
  SwapFile(std::string path, int fd, int64_t size, IoMode mode);

  std::string path_;
  int fd_;
  int64_t size_;
  IoMode mode_;
};

}  // namespace zerotrain::offload
