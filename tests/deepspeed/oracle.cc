// RunOracle and RunProgram (oracle.h): a program (the venv's python, found next to the LibTorch
// this build links, or a binary under test) spawned with its output in files under TEST_TMPDIR,
// polled until it exits or the deadline passes.
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

#include "absl/strings/match.h"
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

absl::StatusOr<std::string> RunProgram(const std::vector<std::string>& argv_in,
                                       const OracleOptions& options) {
  const std::string& program = argv_in.at(0);
  const std::string name = argv_in.size() > 1 && absl::EndsWith(program, "python3")
                               ? argv_in[1]
                               : program.substr(program.find_last_of('/') + 1);
  const std::string dir = OracleTempDir("oracle_run");
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_strings = argv_in;
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  // options.env first: the first of two equal names wins in getenv.
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : options.env) env_strings.push_back(absl::StrCat(k, "=", v));
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  // Its own process group, so a timeout also stops what it started (ranks, DeepSpeed's op build).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, program.c_str(), &files, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    return absl::InternalError(absl::StrCat("could not start ", program, ": error ", spawned));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  int status = 0;
  pid_t waited = 0;
  while ((waited = waitpid(pid, &status, WNOHANG)) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(absl::StrCat(name, " did not finish within ",
                                                      options.deadline.count(), " s; stderr:\n",
                                                      Tail(ReadFile(err_path))));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (waited < 0) {
    return absl::InternalError(absl::StrCat("lost track of ", name, " (waitpid failed)"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(name, " failed (",
                                            WIFEXITED(status)
                                                ? absl::StrCat("exit ", WEXITSTATUS(status))
                                                : absl::StrCat("signal ", WTERMSIG(status)),
                                            "); stderr:\n", Tail(ReadFile(err_path))));
  }
  return ReadFile(out_path);
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
  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), args.begin(), args.end());
  OracleOptions with_venv = options;
  // The venv's bin first: DeepSpeed builds its CPU communication op with the venv's ninja.
  with_venv.env.emplace("PATH", absl::StrCat(venv, "/bin:/usr/bin:/bin"));
  return RunProgram(argv, with_venv);
}

}  // namespace zerotrain::testing
