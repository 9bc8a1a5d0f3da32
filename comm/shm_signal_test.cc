// No /dev/shm segment of the shm backend survives a signal, whenever it comes: SIGKILL or SIGTERM
// of rank 0 while it waits for the others to map its new segment (the launcher removes the
// orphan), SIGTERM of the launcher then (forwarded; the ranks' handlers remove it), and SIGTERM
// of the launcher while the ranks exchange data (the name went once all had mapped it). Each case
// first sees the segment exist, so the window is really hit.
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm_names.h"
#include "gtest/gtest.h"

extern char** environ;

namespace zerotrain::comm {
namespace {

namespace fs = std::filesystem;
std::string g_testee;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// The segments in /dev/shm made under `launcher`.
std::vector<std::string> Segments(pid_t launcher) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename();
    if (LauncherOfShmSegment(name) == launcher) out.push_back(name);
  }
  return out;
}

pid_t Launch(const std::string& mode, const std::string& dir) {
  std::vector<std::string> args = {g_testee, mode, dir, std::to_string(FreePort())};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, g_testee.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

// Polls `done` every 20 ms for up to 30 s.
bool Within30s(const std::function<bool()>& done) {
  for (int i = 0; i < 1500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int ExitCode(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Starts a job whose rank 0 waits with a new segment; `stop` signals something; then checks the
// job's exit code and that no segment of it is left.
void StartUpCase(const std::string& name, const std::function<void(pid_t, pid_t)>& stop,
                 int want_exit) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::create_directories(dir);
  const pid_t launcher = Launch("startup", dir);
  ASSERT_TRUE(Within30s([&] { return !Segments(launcher).empty(); })) << name;
  const std::string segment = Segments(launcher)[0];
  const pid_t rank0 = std::stoi(segment.substr(std::strlen(kShmSegmentPrefix)));
  stop(launcher, rank0);
  EXPECT_EQ(ExitCode(launcher), want_exit) << name;
  EXPECT_EQ(Segments(launcher), std::vector<std::string>{}) << name;
}

TEST(ShmSignalTest, SigkillOfRank0AtStartUpLeavesNoSegment) {
  StartUpCase(
      "kill0", [](pid_t, pid_t rank0) { kill(rank0, SIGKILL); }, 1);
}

TEST(ShmSignalTest, SigtermOfRank0AtStartUpLeavesNoSegment) {
  StartUpCase(
      "term0", [](pid_t, pid_t rank0) { kill(rank0, SIGTERM); }, 1);
}

TEST(ShmSignalTest, SigtermOfTheLauncherAtStartUpLeavesNoSegment) {
  StartUpCase(
      "term_launcher", [](pid_t launcher, pid_t) { kill(launcher, SIGTERM); }, 3);
}

TEST(ShmSignalTest, SigtermMidCollectiveLeavesNoSegment) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/mid";
  fs::create_directories(dir);
  const pid_t launcher = Launch("loop", dir);
  ASSERT_TRUE(Within30s(
      [&] { return fs::exists(dir + "/rank0.attached") && fs::exists(dir + "/rank1.attached"); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // well inside the loop
  kill(launcher, SIGTERM);
  EXPECT_EQ(ExitCode(launcher), 3);
  EXPECT_EQ(Segments(launcher), std::vector<std::string>{});
}

TEST(ShmSignalTest, OrphanSweepRemovesOnlyTheDeadOrTheNamedLaunchers) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/sweep";
  fs::create_directories(dir);
  // A pid that is surely gone: a child that has been reaped.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string me = std::to_string(getpid()), gone = std::to_string(dead);
  const std::vector<std::string> names = {
      "zt-shm-" + gone + "-L" + gone + "-1",  // creator and launcher gone: an orphan
      "zt-shm-" + me + "-L" + gone + "-2",    // its creator lives
      "zt-shm-" + gone + "-L" + me + "-3",    // its launcher lives
      "zt-shm-" + gone + "-7",                // the old naming: not ours to judge
      "other"};
  for (const std::string& n : names) std::ofstream(dir + "/" + n) << "x";
  EXPECT_EQ(RemoveOrphanShmSegments(0, dir), 1);
  EXPECT_FALSE(fs::exists(dir + "/" + names[0]));
  for (size_t i = 1; i < names.size(); ++i) EXPECT_TRUE(fs::exists(dir + "/" + names[i])) << i;
  EXPECT_EQ(RemoveOrphanShmSegments(getpid(), dir), 1);  // everything under launcher `me`
  EXPECT_FALSE(fs::exists(dir + "/" + names[2]));
  const std::string fresh = NewShmSegmentName();
  EXPECT_EQ(fresh[0], '/');
  EXPECT_EQ(LauncherOfShmSegment(fresh.substr(1)), getppid());  // no ZT_LAUNCHER_PID here
  EXPECT_EQ(LauncherOfShmSegment("zt-shm-12-7"), -1);
}

}  // namespace
}  // namespace zerotrain::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) return 2;
  zerotrain::comm::g_testee = argv[1];
  return RUN_ALL_TESTS();
}
