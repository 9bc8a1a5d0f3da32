// Tests of CheckOutputDirWritable: the probe leaves nothing behind, names the field and path on
// failure, and holds when the launchers of several nodes check one shared path at once.
#include "trainer/run_checks.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;

fs::path FreshDir(const std::string& name) {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(CheckOutputDirWritable, MakesNothingThatStays) {
  const fs::path root = FreshDir("stays");
  ASSERT_TRUE(CheckOutputDirWritable((root / "a/b/c").string(), "run.output_dir").ok());
  EXPECT_TRUE(fs::is_empty(root)) << "the check left "
                                  << fs::begin(fs::directory_iterator(root))->path();
}

TEST(CheckOutputDirWritable, NamesFieldAndPathOfAFileInTheWay) {
  const fs::path root = FreshDir("file");
  std::ofstream(root / "plain") << "x";
  const absl::Status s =
      CheckOutputDirWritable((root / "plain/out").string(), "csv_monitor.output_path");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("csv_monitor.output_path"), std::string::npos) << s;
  EXPECT_NE(s.message().find((root / "plain").string() + " is not a directory"), std::string::npos)
      << s;
}

// A check killed half-way leaves its probe; a later one of the same host and pid (containers
// reuse pids) must not trip over it, nor remove what is not its own.
TEST(CheckOutputDirWritable, AProbeLeftBehindIsNoObstacle) {
  const fs::path root = FreshDir("leftover");
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  const std::string stem =
      std::string(".zerotrain-write-probe-") + host + "-" + std::to_string(getpid());
  fs::create_directories(root / stem);
  fs::create_directories(root / "existing");
  std::ofstream(root / "existing" / (stem + "-000000")) << "x";
  ASSERT_TRUE(CheckOutputDirWritable((root / "missing/run").string(), "run.output_dir").ok());
  ASSERT_TRUE(CheckOutputDirWritable((root / "existing").string(), "run.output_dir").ok());
  EXPECT_TRUE(fs::exists(root / stem));
  EXPECT_TRUE(fs::exists(root / "existing" / (stem + "-000000")));
  EXPECT_FALSE(fs::exists(root / "missing"));
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 2);
}

// Each node's launcher checks the shared output directory before its ranks start; a check that
// removed the directory it made must not fail the other node's check (a CI run of multinode_test
// failed so: "cannot write in .../cut: No such file or directory").
TEST(CheckOutputDirWritable, ConcurrentChecksOfOneMissingPathAllPass) {
  const fs::path root = FreshDir("concurrent");
  const std::string dir = (root / "out/t").string();
  constexpr int kProcesses = 4, kRounds = 300;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int round = 0; round < kRounds; ++round) {
        const absl::Status s = CheckOutputDirWritable(dir, "run.output_dir");
        if (!s.ok()) {
          fprintf(stderr, "process %d, round %d: %s\n", p, round, std::string(s.message()).c_str());
          _exit(1);
        }
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a checker failed, see stderr";
  }
  EXPECT_TRUE(fs::is_empty(root));
}

}  // namespace
}  // namespace zerotrain::trainer
