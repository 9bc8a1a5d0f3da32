// Runs launcher_testee as a launcher in its own process and checks what a user of
// `--nproc_per_node` relies on: the rank environment, that one failing rank stops the others
// within seconds with that rank's error, and that SIGINT/SIGTERM reach every rank.
#include "comm/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
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
