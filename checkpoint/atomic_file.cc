// POSIX implementation of the temporary-file-then-rename protocol (see atomic_file.h).
#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "checkpoint/crc32c.h"

namespace zerotrain::checkpoint {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::Status(errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
                      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path) {
  static std::atomic<int> counter{0};
  // Unique per process and call: ranks and threads may write into one directory at once.
  const std::string temp = absl::StrCat(path, ".tmp.", getpid(), ".", counter++);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", temp);
  return AtomicFileWriter(path, temp, fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& o) noexcept
    : path_(std::move(o.path_)),
      temp_(std::move(o.temp_)),
      fd_(o.fd_),
      size_(o.size_),
      crc_(o.crc_) {
  o.fd_ = -1;
  o.temp_.clear();
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

absl::Status AtomicFileWriter::Append(const void* data, int64_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write to closed ", path_));
  const char* p = static_cast<const char*>(data);
  int64_t left = n;
  while (left > 0) {
    const ssize_t w = ::write(fd_, p, static_cast<size_t>(std::min<int64_t>(left, 1 << 30)));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", temp_);
    }
    p += w;
    left -= w;
  }
  crc_ = Crc32cExtend(crc_, data, static_cast<size_t>(n));
  size_ += n;
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("commit of closed ", path_));
  if (::fsync(fd_) != 0) return Errno("cannot fsync", temp_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Errno("cannot close", temp_);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) return Errno("cannot rename to", path_);
  temp_.clear();
  return FsyncDirectory(DirOf(path_));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view data) {
  auto writer = AtomicFileWriter::Open(path);
  if (!writer.ok()) return writer.status();
  absl::Status s = writer->Append(data.data(), static_cast<int64_t>(data.size()));
  if (!s.ok()) return s;
  return writer->Commit();
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot fsync directory", dir);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Errno("cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Errno("cannot read", path);
  return ss.str();
}

}  // namespace zerotrain::checkpoint
