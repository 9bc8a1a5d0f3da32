// POSIX implementation of the temporary-file-then-rename protocol (see atomic_file.h).
#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
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
  // IsTemporaryName recognises this form.
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
  const absl::Status s = WriteAt(size_, data, n);
  if (s.ok()) crc_ = Crc32cExtend(crc_, data, static_cast<size_t>(n));
  return s;
}

absl::Status AtomicFileWriter::WriteAt(int64_t offset, const void* data, int64_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write to closed ", path_));
  const char* p = static_cast<const char*>(data);
  for (int64_t done = 0; done < n;) {
    const ssize_t w = ::pwrite(
        fd_, p + done, static_cast<size_t>(std::min<int64_t>(n - done, 1 << 30)), offset + done);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      if (w == 0) errno = EIO;  // no progress: retrying would spin
      return Errno("cannot write", temp_);
    }
    done += w;
  }
  size_ = std::max(size_, offset + n);
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

absl::StatusOr<uint32_t> FileCrc32c(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::vector<char> buffer(1 << 20);
  uint32_t crc = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = Errno("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    crc = Crc32cExtend(crc, buffer.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return crc;
}

std::string TemporaryTarget(const std::string& name) {
  // "<name>.tmp.<pid>.<n>": the last two dot-separated parts are numbers.
  auto digits = [](absl::string_view s) {
    if (s.empty()) return false;
    for (char c : s) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
  };
  const size_t last = name.rfind('.');
  if (last == std::string::npos || last == 0) return "";
  const size_t pid = name.rfind('.', last - 1);
  if (pid == std::string::npos || pid <= 4 || name.compare(pid - 4, 4, ".tmp") != 0) return "";
  const absl::string_view v(name);
  if (!digits(v.substr(pid + 1, last - pid - 1)) || !digits(v.substr(last + 1))) return "";
  return name.substr(0, pid - 4);
}

absl::StatusOr<int> RemoveTemporaries(const std::string& dir,
                                      const std::function<bool(const std::string&)>& owned) {
  std::error_code ec;
  std::vector<std::filesystem::path> temporaries;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string target = TemporaryTarget(e.path().filename().string());
    if (!target.empty() && owned(target) && e.is_regular_file(ec)) {
      temporaries.push_back(e.path());
    }
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  }
  int removed = 0;
  for (const std::filesystem::path& p : temporaries) {
    if (std::filesystem::remove(p, ec)) ++removed;
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot remove the orphan temporary ", p.string(), ": ", ec.message()));
    }
  }
  return removed;
}

}  // namespace zerotrain::checkpoint
