// What the fault-injection suite's tests share: a fresh directory per case, the tiny 2-rank run
// they all train (saving every 2 steps), and its uninterrupted losses to compare resumes with.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "tests/trainer_process.h"

namespace zerotrain::faults {

inline constexpr int kSteps = 24;

// //trainer:main, from the test's first argument.
void SetTrainerBinary(const std::string& path);
const std::string& TrainerBinary();

// $TEST_TMPDIR/<name>, emptied.
std::string FreshDir(const std::string& name);

// Writes <dir>/run.pbtxt: the run above at `stage` into `out_dir`, resuming `resume_from` (a
// checkpoints directory) when given, and returns its path.
std::string WriteConfig(const std::string& dir, const std::string& out_dir, int stage,
                        const std::string& resume_from = "", int steps = kSteps);

// Runs //trainer:main --config=<config> with its output files in `dir`; `during` gets the
// launcher's pid while it runs.
zerotrain::testing::TrainerResult Train(const std::string& dir, const std::string& config,
                                        std::function<void(pid_t)> during = nullptr);

// The uninterrupted run's losses at `stage`, trained once per process.
const std::map<int64_t, std::string>& StraightLosses(int stage);

}  // namespace zerotrain::faults
