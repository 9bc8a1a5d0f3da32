// The stop handler and its watchdog, in a forked child: the signal leaves a shared-memory segment
// being set up where its peers can still open it (removing its name there once let rank 0 wait out
// the whole stop timeout for a peer that could no longer attach), and the watchdog removes the
// name and ends the process with exit 3 when the unwinding does not.
#include "trainer/stop_signal.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "comm/shm_names.h"
#include "gtest/gtest.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;

// Child exit codes that say which expectation failed.
constexpr int kNameGoneAtSignal = 10;
constexpr int kSignalNotRecorded = 11;
constexpr int kWatchdogDidNotFire = 12;

TEST(StopSignalTest, TheSegmentKeepsItsNameUntilTheWatchdogEndsTheProcess) {
  const std::string name = "/zt-stop-signal-test-" + std::to_string(getpid());
  const std::string path = "/dev/shm" + name;
  std::ofstream(path) << "segment";
  ASSERT_TRUE(fs::exists(path));
  const auto started = std::chrono::steady_clock::now();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    comm::SetPendingShmSegment(name);
    InstallStopSignalHandlers(std::chrono::milliseconds(300));
    raise(SIGTERM);
    if (StopSignalReceived() != SIGTERM) _exit(kSignalNotRecorded);
    if (!fs::exists(path)) _exit(kNameGoneAtSignal);
    // The unwinding is stuck (as in a wait on a peer): the watchdog must end it.
    std::this_thread::sleep_for(std::chrono::seconds(30));
    _exit(kWatchdogDidNotFire);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kStoppedExitCode);
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 20.0);
  EXPECT_FALSE(fs::exists(path)) << path;
  fs::remove(path);
}

}  // namespace
}  // namespace zerotrain::trainer
