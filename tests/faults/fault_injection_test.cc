// The fault-injection suite (docs/RELIABILITY.md): //trainer:main is killed at random moments of
// training and of its saves, resumed from whatever checkpoint survived, and must end with exactly
// the losses of an uninterrupted run; a full disk fails the save but keeps the earlier checkpoint.
// CI runs a few trials (the default); `--trials=N --seed=S` runs the full mode.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_run.h"
#include "tests/trainer_process.h"

namespace {

namespace fs = std::filesystem;
using zerotrain::faults::FreshDir;
using zerotrain::faults::kSteps;
using zerotrain::faults::StraightLosses;
using zerotrain::faults::Train;
using zerotrain::faults::WriteConfig;
using zerotrain::testing::ChildPids;
using zerotrain::testing::CsvLosses;
using zerotrain::testing::TrainerResult;

int g_trials = 4;
uint64_t g_seed = 1;

// Waits until none of `pids` exists: a rank killed with its launcher must be gone before the
// resume starts writing the same directory.
bool AllGone(const std::vector<pid_t>& pids, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (pid_t p : pids) {
    while (kill(p, 0) == 0 || errno != ESRCH) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return true;
}

// Where a trial strikes: once step `step`'s row is in metrics.csv (mid-training), or once the
// save of tag global_step`step` has begun (mid-save), then `delay` later.
struct Strike {
  bool during_save = false;
  int step = 1;
  std::chrono::microseconds delay{0};
};

// Polls the run's files for the strike's moment; false if the run never gets there.
bool AwaitStrike(const Strike& s, const std::string& out, pid_t launcher) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const std::string tag = absl::StrCat(out, "/checkpoints/global_step", s.step);
  while (std::chrono::steady_clock::now() < end && kill(launcher, 0) == 0) {
    const bool there =
        s.during_save ? fs::exists(tag) : CsvLosses(out + "/t/metrics.csv").count(s.step) > 0;
    if (there) {
      std::this_thread::sleep_for(s.delay);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(FaultInjectionTest, KilledRunsResumeToTheUninterruptedLosses) {
  std::mt19937_64 rng(g_seed);
  std::printf("fault injection: %d trials, --seed=%llu\n", g_trials,
              static_cast<unsigned long long>(g_seed));
  for (int trial = 0; trial < g_trials; ++trial) {
    const int stage = trial % 4;
    const auto& straight = StraightLosses(stage);
    ASSERT_FALSE(straight.empty());
    const bool kill_launcher = rng() % 2 == 0;
    Strike strike;
    strike.during_save = rng() % 2 == 0;
    // Saves happen at even steps; the last save is the run's end.
    strike.step =
        strike.during_save ? 2 * (1 + rng() % (kSteps / 2 - 1)) : 1 + rng() % (kSteps - 1);
    strike.delay = std::chrono::microseconds(rng() % 30000);
    const uint64_t victim_pick = rng();
    const std::string what =
        absl::StrCat("SIGKILL to ", kill_launcher ? "the launcher" : "a rank", " ",
                     strike.delay.count() / 1000.0, " ms after ",
                     strike.during_save ? "the save of step " : "the row of step ", strike.step);
    SCOPED_TRACE(absl::StrCat("trial ", trial, ": stage ", stage, ", ", what));
    const std::string dir = FreshDir(absl::StrCat("trial", trial));
    const std::string out = dir + "/out";
    std::vector<pid_t> ranks;
    bool struck = false;
    const TrainerResult killed = Train(dir, WriteConfig(dir, out, stage), [&](pid_t launcher) {
      struck = AwaitStrike(strike, out, launcher);
      ranks = ChildPids(launcher);
      if (kill_launcher || ranks.empty()) {
        kill(launcher, SIGKILL);
      } else {
        kill(ranks[victim_pick % ranks.size()], SIGKILL);
      }
    });
    ASSERT_TRUE(struck) << "the run never reached the strike: " << killed.out << killed.err;
    ASSERT_TRUE(AllGone(ranks, std::chrono::seconds(20))) << "ranks outlived their launcher";
    const std::string checkpoints = out + "/checkpoints";
    const bool saved = fs::exists(checkpoints + "/latest");
    const std::string latest = zerotrain::testing::ReadFile(checkpoints + "/latest");
    const std::string tag = latest.substr(0, latest.find('\n'));
    // The kill can come after the last step's save: the run is then complete, as a user would
    // find it, and there is nothing to resume.
    const bool finished = tag == absl::StrCat("global_step", kSteps);
    std::printf("  trial %d: stage %d, %s: exit %d, %s%s\n", trial, stage, what.c_str(),
                killed.exit_code,
                finished ? "finished before the kill: "
                         : (saved ? "resuming from " : "nothing saved: starting over"),
                tag.c_str());
    if (finished) {
      EXPECT_EQ(CsvLosses(out + "/t/metrics.csv"), straight) << killed.out;
      continue;
    }
    if (!saved) fs::remove_all(out);
    const std::string resume_dir = FreshDir(absl::StrCat("trial", trial, "_resume"));
    const TrainerResult resumed =
        Train(resume_dir, WriteConfig(resume_dir, out, stage, saved ? checkpoints : ""));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
    EXPECT_EQ(CsvLosses(out + "/t/metrics.csv"), straight) << resumed.out;
  }
}

// A file system with room for one checkpoint: the second save fails with the reason named, the
// first stays `latest`, and a resume from it trains on to the uninterrupted losses.
TEST(FaultInjectionTest, FullDiskKeepsTheEarlierCheckpoint) {
  const auto& straight = StraightLosses(2);
  const std::string dir = FreshDir("disk_full");
  const std::string small = dir + "/small";
  fs::create_directories(small);
  // One tag of this model is ~1.4 MiB; the monitors need a few KiB.
  if (mount("tmpfs", small.c_str(), "tmpfs", 0, "size=2200k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs to fill (" << std::strerror(errno)
                 << "): needs root";
  }
  // Unmounted however the test ends: a mount left in the test's directory would break the
  // next build's tree.
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{small};
  const std::string out = small + "/out";
  const TrainerResult full = Train(dir, WriteConfig(dir, out, 2));
  const std::string latest = zerotrain::testing::ReadFile(out + "/checkpoints/latest");
  EXPECT_NE(full.exit_code, 0) << full.out << full.err;
  EXPECT_TRUE(absl::StrContains(full.err, "No space left on device")) << full.err;
  EXPECT_EQ(latest.substr(0, latest.find_first_of("\n")), "global_step2");
  // Resumed elsewhere: the small disk is full.
  const std::string resume_dir = FreshDir("disk_full_resume");
  fs::create_directories(resume_dir + "/out");
  fs::copy(out + "/t", resume_dir + "/out/t", fs::copy_options::recursive);
  const TrainerResult resumed =
      Train(resume_dir, WriteConfig(resume_dir, resume_dir + "/out", 2, out + "/checkpoints"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(CsvLosses(resume_dir + "/out/t/metrics.csv"), straight);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (absl::StartsWith(arg, "--trials=") && absl::SimpleAtoi(arg.substr(9), &g_trials)) continue;
    if (absl::StartsWith(arg, "--seed=") && absl::SimpleAtoi(arg.substr(7), &g_seed)) continue;
    std::fprintf(stderr, "fault_injection_test: unknown argument %s\n", arg.c_str());
    return 2;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_injection_test <//trainer:main> [--trials=N] [--seed=S]\n");
    return 2;
  }
  zerotrain::faults::SetTrainerBinary(argv[1]);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  return RUN_ALL_TESTS();
}
