// RunOracle (oracle.h): the venv's python found next to the LibTorch this build links, spawned
// with its output in files under TEST_TMPDIR, polled until it exits or the deadline passes.
#include "tests/deepspeed/oracle.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace zerotrain::testing {
namespace {

// ZT_TORCH_HOME is <venv>/lib/python3.X/site-packages/torch (tests/deepspeed/BUILD).
std::string VenvDir() { return std::string(ZT_TORCH_HOME) + "/../../../.."; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Tail(const std::string& text, size_t n = 3000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

}  // namespace

std::string OracleTempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

absl::StatusOr<std::string> RunOracle(const std::string& script,
                                      const std::vector<std::string>& args,
                                      const OracleOptions& options) {
  const std::string venv = VenvDir();
  const std::string python = venv + "/bin/python3";
  if (access(python.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no python in the project venv (", python,
                     "): run tools/setup.sh, which installs DeepSpeed 0.19.8 there as the oracle"));
  }
  const std::string dir = OracleTempDir("oracle_run");
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_strings = {python, script};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The venv's bin first: DeepSpeed builds its CPU communication op with the venv's ninja.
  std::vector<std::string> env_strings = {absl::StrCat("PATH=", venv, "/bin:/usr/bin:/bin")};
  for (const auto& [k, v] : options.env) env_strings.push_back(absl::StrCat(k, "=", v));
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("PATH=", 0) != 0) env_strings.push_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  // Its own process group, so a timeout also stops what it started (DeepSpeed's op build).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, python.c_str(), &files, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    return absl::InternalError(absl::StrCat("could not start ", python, ": error ", spawned));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  int status = 0;
  pid_t waited = 0;
  while ((waited = waitpid(pid, &status, WNOHANG)) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(absl::StrCat(script, " did not finish within ",
                                                      options.deadline.count(), " s; stderr:\n",
                                                      Tail(ReadFile(err_path))));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (waited < 0) {
    return absl::InternalError(absl::StrCat("lost track of ", script, " (waitpid failed)"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(script, " failed (",
                                            WIFEXITED(status)
                                                ? absl::StrCat("exit ", WEXITSTATUS(status))
                                                : absl::StrCat("signal ", WTERMSIG(status)),
                                            "); stderr:\n", Tail(ReadFile(err_path))));
  }
  return ReadFile(out_path);
}

}  // namespace zerotrain::testing
