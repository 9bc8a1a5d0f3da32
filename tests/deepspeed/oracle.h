// RunOracle: runs one of tests/deepspeed/'s Python scripts with DeepSpeed 0.19.8 itself, in the
// project's .venv where tools/setup.sh installed it (the venv that also holds the LibTorch this
// build links), so conformance tests compare zerotrain against DeepSpeed's own code rather than
// against numbers someone wrote down. The build and the trainer never use it.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::testing {

struct OracleOptions {
  // The script (and what it started) is killed past this: a hang fails the test instead of
  // holding it. Below the tests' Bazel timeout ("long", 900 s) even for three calls in one test.
  std::chrono::seconds deadline{240};
  std::map<std::string, std::string> env;  // added to the script's environment
};

// Runs `script` (a path relative to the workspace, e.g. "tests/deepspeed/lr_oracle.py") with
// `args`; returns its stdout. An error names the script, how it ended and the end of its
// stderr; a missing venv or DeepSpeed says to run tools/setup.sh.
absl::StatusOr<std::string> RunOracle(const std::string& script,
                                      const std::vector<std::string>& args,
                                      const OracleOptions& options = {});

// Runs argv[0] (a path) with the rest of argv, the test's environment plus options.env, in a
// process group of its own that is killed at the deadline; returns its stdout. An error names
// the program, how it ended (exit code, signal or deadline) and the end of its stderr.
absl::StatusOr<std::string> RunProgram(const std::vector<std::string>& argv,
                                       const OracleOptions& options = {});

// A fresh directory under the test's temporary directory.
std::string OracleTempDir(const std::string& name);

}  // namespace zerotrain::testing
