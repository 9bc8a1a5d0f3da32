// OutputDirLock: one holder at a time, released when the holder ends or dies; and end to end, a
// second //trainer:main on a directory in use fails at once, exit 2, one line, nothing written.
#include "trainer/output_dir_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer/main_runner.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;
using testing::Dir;

TEST(OutputDirLockTest, OneHolderAtATimeNamedByPid) {
  const std::string dir = Dir("lock_one") + "/out/nested";
  auto first = OutputDirLock::Acquire(dir, "run.output_dir");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = OutputDirLock::Acquire(dir, "run.output_dir");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(second.status().message()),
            absl::StrCat("run.output_dir = \"", dir, "\" is in use by another run (pid ", getpid(),
                         ", holding ", dir, "/.zerotrain.lock); give this run its own ",
                         "run.output_dir, or wait for that run to end"));
  { OutputDirLock released = *std::move(first); }
  EXPECT_TRUE(OutputDirLock::Acquire(dir, "run.output_dir").ok());
}

// A run refused after taking the lock leaves nothing: the lock file and the directories it made
// go, a directory that was there before stays.
TEST(OutputDirLockTest, AbandonLeavesNothingBehind) {
  const std::string root = Dir("lock_abandon");
  auto lock = OutputDirLock::Acquire(root + "/a/b", "run.output_dir");
  ASSERT_TRUE(lock.ok()) << lock.status();
  ASSERT_TRUE(fs::exists(root + "/a/b/.zerotrain.lock"));
  lock->Abandon();
  EXPECT_FALSE(fs::exists(root + "/a"));
  EXPECT_TRUE(fs::exists(root));
  EXPECT_TRUE(OutputDirLock::Acquire(root + "/a/b", "run.output_dir").ok());
}

// The kernel releases a dead holder's lock: nothing to clean up after a crash.
TEST(OutputDirLockTest, AHolderKilledLeavesTheDirectoryFree) {
  const std::string dir = Dir("lock_killed");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto lock = OutputDirLock::Acquire(dir, "run.output_dir");
    const char byte = lock.ok() ? 1 : 0;
    (void)!write(ready[1], &byte, 1);
    pause();
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 1);
  auto busy = OutputDirLock::Acquire(dir, "run.output_dir");
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(std::string(busy.status().message()).find(absl::StrCat("(pid ", child, ",")),
            std::string::npos)
      << busy.status();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(OutputDirLock::Acquire(dir, "run.output_dir").ok());
}

TEST(OutputDirLockTest, ADirectoryThatCannotBeMadeIsNamed) {
  auto lock = OutputDirLock::Acquire("/proc/zerotrain_lock/out", "run.output_dir");
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      std::string(lock.status().message()).find("run.output_dir = \"/proc/zerotrain_lock/out\""),
      std::string::npos)
      << lock.status();
}

// A second run on a directory a live run holds: one line naming both, exit 2, before any rank
// starts, and not one byte of its own written there.
TEST(OutputDirLockTest, ASecondTrainerOnTheSameDirectoryFailsAtOnce) {
  const std::string dir = Dir("lock_main");
  const std::string out_dir = dir + "/out";
  auto held = OutputDirLock::Acquire(out_dir, "run.output_dir");
  ASSERT_TRUE(held.ok()) << held.status();
  const testing::Result r =
      testing::RunMain({"--config=" + testing::WriteConfig(dir, out_dir, 3)}, dir);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err, absl::StrCat("zerotrain: error: run.output_dir = \"", out_dir,
                                "\" is in use by another run (pid ", getpid(), ", holding ",
                                out_dir, "/.zerotrain.lock); give this run its own ",
                                "run.output_dir, or wait for that run to end\n"));
  EXPECT_TRUE(r.out.empty()) << r.out;
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(out_dir)) entries.push_back(e.path().filename());
  EXPECT_EQ(entries, std::vector<std::string>{".zerotrain.lock"});
  // Once the holder is gone the same run trains.
  { OutputDirLock released = *std::move(held); }
  const testing::Result ok =
      testing::RunMain({"--config=" + testing::WriteConfig(dir, out_dir, 3)}, dir);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

}  // namespace
}  // namespace zerotrain::trainer

int main(int argc, char** argv) {
  if (!zerotrain::trainer::testing::StartCpuTests(&argc, argv, 1,
                                                  "output_dir_lock_test <path of //trainer:main>"))
    return 2;
  return RUN_ALL_TESTS();
}
