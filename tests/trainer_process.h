// Runs //trainer:main as a child process, the way a user starts it, for tests that judge a run by
// its exit code, its output and the files it leaves: the end-to-end trainer tests and the
// fault-injection suite (tests/faults).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zerotrain::testing {

struct TrainerResult {
  int exit_code = -1;  // 128 + N when a signal N ended it
  std::string out, err;
  double seconds = 0;
};

struct TrainerRun {
  std::string binary;              // //trainer:main
  std::vector<std::string> flags;  // argv[1..]
  std::string dir;                 // receives the child's stdout and stderr files
  std::vector<std::string> env;    // "NAME=value", added to this process's environment
  // Called with the child's pid while it runs (to signal it); the child is reaped afterwards.
  std::function<void(pid_t)> during;
};

TrainerResult RunTrainer(const TrainerRun& run);

// Starts the run without waiting; Wait() reaps it. For tests that run two jobs at once.
pid_t StartTrainer(const TrainerRun& run);
TrainerResult WaitTrainer(pid_t pid, const TrainerRun& run);

std::string ReadFile(const std::string& path);

// The pids of `pid`'s child processes (a launcher's ranks), from /proc.
std::vector<pid_t> ChildPids(pid_t pid);

// metrics.csv's loss column by step, as written (every digit kept, so equal text is an equal
// float). A step written twice, by a run and by its resume, keeps the later row; a torn last row
// of a killed run is skipped.
std::map<int64_t, std::string> CsvLosses(const std::string& path);

}  // namespace zerotrain::testing
