// SwapFile: creation with preallocation and the O_DIRECT/buffered choice, and the full-length
// positional I/O loops whose errors name the file, the offset and the sizes.
#include "offload/swap_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zerotrain::offload {
namespace {

bool Aligned(int64_t v) { return v % kIoAlignment == 0; }

absl::Status CloseAndRemove(int fd, const std::string& path, absl::Status error) {
  if (fd >= 0) close(fd);
  unlink(path.c_str());
  return error;
}

}  // namespace

const char* IoModeName(IoMode mode) { return mode == IoMode::kDirect ? "O_DIRECT" : "buffered"; }

SwapFile::SwapFile(std::string path, int fd, int64_t size, IoMode mode)
    : path_(std::move(path)), fd_(fd), size_(size), mode_(mode) {}

SwapFile::~SwapFile() {
  close(fd_);
  unlink(path_.c_str());
}

absl::StatusOr<std::unique_ptr<SwapFile>> SwapFile::Create(const std::string& path, int64_t bytes,
                                                           bool try_direct) {
  if (bytes <= 0 || !Aligned(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("SwapFile: size of ", path, " must be a ",
                                                   "positive multiple of ", kIoAlignment, ", got ",
                                                   bytes));
  }
  // O_EXCL: a swap file that already exists belongs to someone else (another rank, a crashed
  // run); overwriting and later deleting it would be worse than refusing.
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("SwapFile: cannot create ", path));
  }
  int err;
  do {
    err = posix_fallocate(fd, 0, bytes);
  } while (err == EINTR);
  if (err != 0) {
    return CloseAndRemove(
        fd, path,
        absl::ErrnoToStatus(err, absl::StrCat("SwapFile: cannot preallocate ", bytes, " bytes for ",
                                              path, " (posix_fallocate)")));
  }
  if (close(fd) != 0) {
    return CloseAndRemove(-1, path,
                          absl::ErrnoToStatus(errno, absl::StrCat("SwapFile: close of ", path,
                                                                  " after preallocation")));
  }
  // Reopened rather than opened with O_DIRECT at once: an O_DIRECT open that the filesystem
  // refuses can still have created the file, which would defeat O_EXCL on the retry.
  IoMode mode = IoMode::kBuffered;
  fd = -1;
  if (try_direct) {
    fd = open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd >= 0) {
      mode = IoMode::kDirect;
    } else if (errno != EINVAL) {
      return CloseAndRemove(-1, path,
                            absl::ErrnoToStatus(errno, absl::StrCat("SwapFile: cannot open ", path,
                                                                    " with O_DIRECT")));
    }
  }
  if (fd < 0) fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return CloseAndRemove(-1, path,
                          absl::ErrnoToStatus(errno, absl::StrCat("SwapFile: cannot open ", path)));
  }
  return std::unique_ptr<SwapFile>(new SwapFile(path, fd, bytes, mode));
}

absl::Status SwapFile::CheckRange(const char* op, int64_t offset, const void* buffer,
                                  int64_t bytes) const {
  if (buffer == nullptr || bytes <= 0 || offset < 0 || !Aligned(offset) || !Aligned(bytes) ||
      reinterpret_cast<uintptr_t>(buffer) % kIoAlignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SwapFile: ", op, " of ", path_, ": offset ", offset, ", size ", bytes,
                     " and buffer ", absl::Hex(reinterpret_cast<uintptr_t>(buffer)),
                     " must be positive multiples of ", kIoAlignment));
  }
  if (offset > size_ - bytes) {
    return absl::OutOfRangeError(absl::StrCat("SwapFile: ", op, " of ", path_, ": [", offset, ", ",
                                              offset + bytes, ") is beyond its ", size_, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status SwapFile::Read(int64_t offset, void* buffer, int64_t bytes) const {
  if (absl::Status s = CheckRange("read", offset, buffer, bytes); !s.ok()) return s;
  char* p = static_cast<char*>(buffer);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = pread(fd_, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(
          errno, absl::StrCat("SwapFile: read of ", bytes - done, " bytes of ", path_,
                              " at offset ", offset + done, " failed"));
    }
    // Under O_DIRECT only the end of the file can cut a transfer at an unaligned length, and the
    // next call at that unaligned offset would fail with a less helpful EINVAL.
    const bool eof = n == 0 || (mode_ == IoMode::kDirect && !Aligned(n) && done + n < bytes);
    if (eof) {
      struct stat st;
      const int64_t now = fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
      return absl::DataLossError(
          absl::StrCat("SwapFile: short read of ", path_, " at offset ", offset, ": wanted ", bytes,
                       " bytes, got ", done + n, " before the end of the file (now ", now,
                       " bytes; created with ", size_, "): was it truncated?"));
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status SwapFile::Write(int64_t offset, const void* buffer, int64_t bytes) const {
  if (absl::Status s = CheckRange("write", offset, buffer, bytes); !s.ok()) return s;
  const char* p = static_cast<const char*>(buffer);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = pwrite(fd_, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(
          errno, absl::StrCat("SwapFile: write of ", bytes - done, " bytes to ", path_,
                              " at offset ", offset + done, " failed"));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("SwapFile: write to ", path_, " at offset ",
                                              offset + done, " made no progress (", done, " of ",
                                              bytes, " bytes written)"));
    }
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::offload
