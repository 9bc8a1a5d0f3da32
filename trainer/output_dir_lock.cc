// OutputDirLock (see output_dir_lock.h): flock(2) on a file inside the output directory.
#include "trainer/output_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::trainer {

absl::StatusOr<OutputDirLock> OutputDirLock::Acquire(const std::string& dir,
                                                     const std::string& field) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", dir, "\": ", why));
  };
  std::error_code ec;
  std::vector<std::string> created;
  for (std::filesystem::path p = std::filesystem::absolute(dir, ec).lexically_normal();
       !p.empty() && p != p.parent_path() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    if (p.has_filename()) created.push_back(p.string());
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return bad(absl::StrCat("cannot create it: ", ec.message()));
  const std::string path = absl::StrCat(dir, "/", kOutputDirLockName);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return bad(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char text[32] = {};
    const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK)
      return bad(absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    const std::string pid(absl::StripAsciiWhitespace(std::string(text, n > 0 ? n : 0)));
    return absl::FailedPreconditionError(absl::StrCat(
        field, " = \"", dir, "\" is in use by another run (pid ", pid.empty() ? "unknown" : pid,
        ", holding ", path, "); give this run its own ", field, ", or wait for that run to end"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; a second run's message then says "unknown".
  }
  return OutputDirLock(fd, path, std::move(created));
}

void OutputDirLock::Abandon() {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  close(fd_);
  fd_ = -1;
  std::error_code ec;
  for (const std::string& d : created_) std::filesystem::remove(d, ec);  // only when empty
}

OutputDirLock& OutputDirLock::operator=(OutputDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    created_ = std::move(other.created_);
    other.fd_ = -1;
  }
  return *this;
}

OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) close(fd_);  // closing releases the lock
}

}  // namespace zerotrain::trainer
