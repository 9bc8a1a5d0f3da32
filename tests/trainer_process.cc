// Child-process plumbing for tests of //trainer:main: spawn with redirected output, wait, and read
// back what the run wrote.
#include "tests/trainer_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace zerotrain::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::map<pid_t, Clock::time_point>& StartTimes() {
  static auto* starts = new std::map<pid_t, Clock::time_point>();
  return *starts;
}

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

pid_t StartTrainer(const TrainerRun& run) {
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, (run.dir + "/stdout").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, (run.dir + "/stderr").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {run.binary};
  args.insert(args.end(), run.flags.begin(), run.flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = run.env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, run.binary.c_str(), &files, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) return -1;
  StartTimes()[pid] = Clock::now();
  return pid;
}

TrainerResult WaitTrainer(pid_t pid, const TrainerRun& run) {
  TrainerResult r;
  if (pid <= 0) {
    r.err = "could not start " + run.binary;
    return r;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.seconds = std::chrono::duration<double>(Clock::now() - StartTimes()[pid]).count();
  StartTimes().erase(pid);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(run.dir + "/stdout");
  r.err = ReadFile(run.dir + "/stderr");
  return r;
}

TrainerResult RunTrainer(const TrainerRun& run) {
  const pid_t pid = StartTrainer(run);
  if (pid > 0 && run.during) run.during(pid);
  return WaitTrainer(pid, run);
}

std::vector<pid_t> ChildPids(pid_t pid) {
  std::vector<pid_t> out;
  std::stringstream children(
      ReadFile("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t child; children >> child;) out.push_back(child);
  return out;
}

std::map<int64_t, std::string> CsvLosses(const std::string& path) {
  std::map<int64_t, std::string> losses;
  const std::string text = ReadFile(path);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  // The text after the last newline is a row a killed writer did not finish.
  if (!lines.empty()) lines.pop_back();
  int loss_column = -1;
  for (const std::string& line : lines) {
    const std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (loss_column < 0 || cells[0] == "step") {
      for (size_t i = 0; i < cells.size(); ++i) {
        if (cells[i] == "loss") loss_column = static_cast<int>(i);
      }
      continue;
    }
    int64_t step = 0;
    if (loss_column >= static_cast<int>(cells.size()) || cells[loss_column].empty() ||
        !absl::SimpleAtoi(cells[0], &step)) {
      continue;  // an eval-only row
    }
    losses[step] = cells[loss_column];
  }
  return losses;
}

}  // namespace zerotrain::testing
