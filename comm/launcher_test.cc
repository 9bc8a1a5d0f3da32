// Runs launcher_testee as a launcher in its own process and checks what a user of
// `--nproc_per_node` relies on: the rank environment, that one failing rank stops the others
// within seconds with that rank's error (its own, not another's echo of it), that SIGINT/SIGTERM
// reach every rank, and that a one-node job gets a free port and a job id of its own.
#include "comm/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/tcp_port.h"
#include "gtest/gtest.h"

namespace zerotrain::comm {
namespace {

std::string g_testee;  // argv[1]: the testee's path

struct LauncherRun {
  int exit_code = -1;
  std::string stderr_text;
  double seconds = 0;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts the testee launcher; `during` runs while it is alive (given its pid).
LauncherRun RunLauncher(const std::string& mode, const std::string& dir,
                        const std::function<void(pid_t)>& during = nullptr) {
  const std::string err = dir + "/launcher.stderr";
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {g_testee, mode, dir};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  LauncherRun run;
  if (posix_spawn(&pid, g_testee.c_str(), &files, nullptr, argv.data(), environ) != 0) return run;
  posix_spawn_file_actions_destroy(&files);
  if (during) during(pid);
  int status = 0;
  waitpid(pid, &status, 0);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.stderr_text = ReadFile(err);
  return run;
}

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

bool WaitForFiles(const std::string& a, const std::string& b) {
  for (int i = 0; i < 500; ++i) {
    if (std::filesystem::exists(a) && std::filesystem::exists(b)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(LauncherTest, SetsTheRankEnvironment) {
  const std::string dir = TempDir("env");
  const LauncherRun run = RunLauncher("ok", dir);
  EXPECT_EQ(run.exit_code, 0) << run.stderr_text;
  // RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT OMP_NUM_THREADS
  EXPECT_EQ(ReadFile(dir + "/rank2.env"), "2 0 4 2 127.0.0.1 29123 1");
  EXPECT_EQ(ReadFile(dir + "/rank3.env"), "3 1 4 2 127.0.0.1 29123 1");
}

TEST(LauncherTest, FailingRankStopsTheOthersAndItsErrorIsReported) {
  const std::string dir = TempDir("fail");
  const LauncherRun run = RunLauncher("fail", dir);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.stderr_text.find("rank 3"), std::string::npos) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("exited with code 3"), std::string::npos) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("could not open /data/shard7"), std::string::npos)
      << run.stderr_text;
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank2.got" + std::to_string(SIGTERM)));
  EXPECT_LT(run.seconds, 10.0);  // rank 2 would otherwise sleep 60 s
}

// The rank that failed on its own is reported, not the one that failed first saying only that
// another rank failed.
TEST(LauncherTest, ReportsTheRanksOwnErrorRatherThanAnEcho) {
  const std::string dir = TempDir("echo");
  const LauncherRun run = RunLauncher("echo", dir);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.stderr_text.find("rank 3 (pid "), std::string::npos) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("could not open /data/shard7"), std::string::npos)
      << run.stderr_text;
  EXPECT_EQ(run.stderr_text.find("see their errors"), std::string::npos) << run.stderr_text;
}

// One node without a port: each launch picks a free port and a job id of its own, the same for
// both of its ranks.
TEST(LauncherTest, StandaloneJobPicksAFreePortAndAJobId) {
  std::vector<std::string> ports, jobs;
  for (const std::string name : {"standalone_a", "standalone_b"}) {
    const std::string dir = TempDir(name);
    const LauncherRun run = RunLauncher("standalone", dir);
    ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
    EXPECT_EQ(ReadFile(dir + "/rank0.port"), ReadFile(dir + "/rank1.port"));
    EXPECT_EQ(ReadFile(dir + "/rank0.job"), ReadFile(dir + "/rank1.job"));
    ports.push_back(ReadFile(dir + "/rank0.port"));
    jobs.push_back(ReadFile(dir + "/rank0.job"));
    const int port = std::stoi(ports.back());
    EXPECT_GT(port, 0);
    EXPECT_NE(port, 29500);
    EXPECT_TRUE(CheckPortFree(port).ok());  // the launcher's probe left nothing bound
    EXPECT_FALSE(jobs.back().empty());
  }
  EXPECT_NE(jobs[0], jobs[1]);
}

// A port held by another process: one line naming it and the flag, before any rank starts.
TEST(LauncherTest, RefusesAPortInUseBeforeStartingRanks) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  LaunchOptions o;
  o.program = "/nonexistent/rank";  // starting a rank would be a different error
  o.master_port = port;
  const absl::Status s = LaunchRanks(o);
  close(fd);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find(absl::StrCat("port ", port, " (--master_port) is in use")),
            absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("pass --master_port=PORT"), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
}

TEST(LauncherTest, ForwardsSigintToEveryRank) {
  const std::string dir = TempDir("sigint");
  const LauncherRun run = RunLauncher("wait", dir, [&](pid_t launcher) {
    ASSERT_TRUE(WaitForFiles(dir + "/rank2.ready", dir + "/rank3.ready"));
    kill(launcher, SIGINT);
  });
  EXPECT_EQ(run.exit_code, 3) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("stopped by signal"), std::string::npos) << run.stderr_text;
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank2.got" + std::to_string(SIGINT)));
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank3.got" + std::to_string(SIGINT)));
  EXPECT_LT(run.seconds, 10.0);
}

// Ranks that were signalled directly (not through the launcher) and stopped cleanly, exiting with
// stopped_exit_code, are no failure: the launch ends Cancelled, as if the launcher had been
// signalled, and the later rank is left to stop on its own.
TEST(LauncherTest, RanksThatStoppedOnTheirOwnSignalEndTheLaunchCancelled) {
  const std::string dir = TempDir("stopped");
  const LauncherRun run = RunLauncher("stopped", dir);
  EXPECT_EQ(run.exit_code, 3) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("CANCELLED"), std::string::npos) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("was stopped by a signal sent to it and exited with code 7"),
            std::string::npos)
      << run.stderr_text;
  EXPECT_LT(run.seconds, 10.0);
}

TEST(LauncherTest, RejectsBadOptions) {
  LaunchOptions o;
  o.nnodes = 2;
  o.node_rank = 2;
  const absl::Status s = LaunchRanks(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("node_rank=2"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace zerotrain::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: launcher_test <path of launcher_testee>\n");
    return 2;
  }
  zerotrain::comm::g_testee = argv[1];
  return RUN_ALL_TESTS();
}
