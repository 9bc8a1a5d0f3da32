// One run per output directory: a run holds an flock on <output_dir>/.zerotrain.lock for as long
// as it lives, so a second run given the same directory fails at once instead of interleaving its
// metrics and checkpoints with the first's. The kernel releases the lock when the holder dies, so
// a crash leaves nothing to clean up.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::trainer {

inline constexpr char kOutputDirLockName[] = ".zerotrain.lock";

class OutputDirLock {
 public:
  // Creates `dir` if needed and takes its lock, recording this process's pid in it. Another live
  // run's lock is FailedPrecondition naming the directory and the holder's pid; a directory that
  // cannot be made or locked is InvalidArgument naming it. `field` names the setting in errors.
  static absl::StatusOr<OutputDirLock> Acquire(const std::string& dir, const std::string& field);

  OutputDirLock(OutputDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  OutputDirLock& operator=(OutputDirLock&& other) noexcept;
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  ~OutputDirLock();

 private:
  explicit OutputDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace zerotrain::trainer
