// One run per output directory: a run holds an flock on <output_dir>/.zerotrain.lock for as long
// as it lives, so a second run given the same directory fails at once instead of interleaving its
// metrics and checkpoints with the first's. The kernel releases the lock when the holder dies, so
// a crash leaves nothing to clean up.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::trainer {

inline constexpr char kOutputDirLockName[] = ".zerotrain.lock";

class OutputDirLock {
 public:
  // Creates `dir` if needed and takes its lock, recording this process's pid in it. Another live
  // run's lock is FailedPrecondition naming the directory and the holder's pid; a directory that
  // cannot be made or locked is InvalidArgument naming it. `field` names the setting in errors.
  static absl::StatusOr<OutputDirLock> Acquire(const std::string& dir, const std::string& field);

  // For a run refused after the lock was taken (bad input found later, e.g. a port in use):
  // removes the lock file and the directories Acquire created, so nothing is left written.
  void Abandon();

  OutputDirLock(OutputDirLock&& other) noexcept
      : fd_(other.fd_), path_(std::move(other.path_)), created_(std::move(other.created_)) {
    other.fd_ = -1;
  }
  OutputDirLock& operator=(OutputDirLock&& other) noexcept;
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  ~OutputDirLock();

 private:
  OutputDirLock(int fd, std::string path, std::vector<std::string> created)
      : fd_(fd), path_(std::move(path)), created_(std::move(created)) {}
  int fd_ = -1;
  std::string path_;                  // the lock file
  std::vector<std::string> created_;  // directories Acquire made, innermost first
};

}  // namespace zerotrain::trainer
