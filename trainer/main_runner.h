// Runs //trainer:main as a user would, in a child process, for the trainer's end-to-end tests:
// a config written from named entries, the run's exit code, stdout and stderr, and the step
// losses it printed.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zerotrain::trainer::testing {

struct Result {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

// A test binary's start: gtest's flags, then `paths` paths after the program name (the first is
// //trainer:main, which it passes to SetMainBinary), and every GPU hidden, so the children are
// CPU runs whatever the machine ("auto" must find no GPU, "cuda" must be refused). False, having
// printed `usage`, when the paths are missing. Then RUN_ALL_TESTS().
bool StartCpuTests(int* argc, char** argv, int paths, const char* usage);

// The trainer binary every RunMain starts (the test's argv[1]).
void SetMainBinary(const std::string& path);
const std::string& MainBinary();

std::string Read(const std::string& path);

// $TEST_TMPDIR/<name>, created.
std::string Dir(const std::string& name);

// A config for a tiny, fast run writing into `out_dir`, one top-level entry per key; `replace`
// swaps entries (or adds new keys) by key.
std::string WriteConfig(const std::string& dir, const std::string& out_dir, int steps,
                        const std::map<std::string, std::string>& replace = {});

// Runs the trainer with `flags`, its stdout and stderr going to files in `dir`; `during` is
// called with the child's pid while it runs; `env` entries ("NAME=value") are added to the
// test's environment.
Result RunMain(const std::vector<std::string>& flags, const std::string& dir,
               const std::function<void(pid_t)>& during = nullptr,
               const std::vector<std::string>& env = {});

// The losses of the "step k/n | loss x" lines, in order.
std::vector<double> StepLosses(const std::string& out);

}  // namespace zerotrain::trainer::testing
