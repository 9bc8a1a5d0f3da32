// The node launcher (see launcher.h): spawn, supervise, forward signals, report the first failure.
#include "comm/launcher.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "comm/shm_names.h"

extern char** environ;

namespace zerotrain::comm {
namespace {

constexpr char kLauncherPidVar[] = "ZT_LAUNCHER_PID";
constexpr char kErrorFileVar[] = "ZT_ERROR_FILE";

volatile sig_atomic_t g_signal = 0;
void RecordSignal(int signo) { g_signal = signo; }

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  std::string error_file;
};

absl::Status CheckOptions(const LaunchOptions& o) {
  auto bad = [](const char* name, const std::string& value) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher: --", name, "=", value, " is out of range"));
  };
  if (o.nproc_per_node < 1) return bad("nproc_per_node", std::to_string(o.nproc_per_node));
  if (o.nnodes < 1) return bad("nnodes", std::to_string(o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return bad("node_rank", absl::StrCat(o.node_rank, " (nnodes=", o.nnodes, ")"));
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return bad("master_port", std::to_string(o.master_port));
  }
  if (o.master_addr.empty()) return bad("master_addr", "\"\"");
  return absl::OkStatus();
}

// The parent's environment without the variables that place a process in a job (ours replace
// them; getenv would return the first of two), plus this rank's.
std::vector<std::string> RankEnv(const LaunchOptions& o, int local_rank, const std::string& error) {
  constexpr absl::string_view kPlacement[] = {
      "RANK=",         "LOCAL_RANK=",    "WORLD_SIZE=",      "LOCAL_WORLD_SIZE=",
      "MASTER_ADDR=",  "MASTER_PORT=",   "OMPI_COMM_WORLD_", "SLURM_PROCID=",
      "SLURM_NTASKS=", "SLURM_LOCALID=", kErrorFileVar};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view kv(*e);
    bool placement = false;
    for (absl::string_view prefix : kPlacement)
      placement = placement || absl::StartsWith(kv, prefix);
    if (!placement) env.emplace_back(kv);
  }
  // ATen's OpenMP threads spin after each parallel region and starve the other ranks' network
  // threads when ranks share cores (docs/COMM.md); torchrun sets 1 as well when it starts more
  // than one process.
  if (std::getenv("OMP_NUM_THREADS") == nullptr && o.nproc_per_node > 1) {
    env.push_back("OMP_NUM_THREADS=1");
  }
  const int world = o.nnodes * o.nproc_per_node;
  env.push_back(absl::StrCat("RANK=", o.node_rank * o.nproc_per_node + local_rank));
  env.push_back(absl::StrCat("LOCAL_RANK=", local_rank));
  env.push_back(absl::StrCat("WORLD_SIZE=", world));
  env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", o.nproc_per_node));
  env.push_back(absl::StrCat("MASTER_ADDR=", o.master_addr));
  env.push_back(absl::StrCat("MASTER_PORT=", o.master_port));
  env.push_back(absl::StrCat(kLauncherPidVar, "=", getpid()));
  env.push_back(absl::StrCat(kErrorFileVar, "=", error));
  return env;
}

absl::Status Spawn(const LaunchOptions& o, Rank& r) {
  std::vector<std::string> env = RankEnv(o, r.rank, r.error_file);
  std::vector<std::string> args = {o.program};
  args.insert(args.end(), o.args.begin(), o.args.end());
  std::vector<char*> envp, argv;
  for (std::string& s : env) envp.push_back(s.data());
  for (std::string& s : args) argv.push_back(s.data());
  envp.push_back(nullptr);
  argv.push_back(nullptr);
  // Each rank in its own process group: a terminal's Ctrl-C then reaches the launcher only, which
  // forwards it once, instead of every rank receiving it twice.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  const int err = posix_spawn(&r.pid, o.program.c_str(), nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    return absl::InternalError(absl::StrCat("launcher: could not start local rank ", r.rank, " (",
                                            o.program, "): ", std::strerror(err)));
  }
  r.running = true;
  return absl::OkStatus();
}

std::string RankError(const Rank& r) {
  std::ifstream in(r.error_file);
  std::stringstream text;
  text << in.rdbuf();
  std::string message(absl::StripAsciiWhitespace(text.str()));
  if (message.size() > 4096) message = message.substr(0, 4096) + " ...";
  return message;
}

std::string HowItEnded(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("died from signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("exited with code ", WEXITSTATUS(status));
}

void SignalAll(std::vector<Rank>& ranks, int signo) {
  for (Rank& r : ranks) {
    if (r.running) kill(r.pid, signo);
  }
}

// Reaps ranks until all are gone; the first failure (or a forwarded signal) stops the rest.
absl::Status Supervise(const LaunchOptions& o, std::vector<Rank>& ranks, int first_global_rank) {
  using Clock = std::chrono::steady_clock;
  absl::Status result;
  bool stopping = false, killed = false;
  Clock::time_point kill_at;
  auto stop = [&](int signo) {
    SignalAll(ranks, signo);
    stopping = true;
    kill_at = Clock::now() + o.grace;
  };
  for (int running = static_cast<int>(ranks.size()); running > 0;) {
    if (const int signo = g_signal; signo != 0 && !stopping) {
      result = absl::CancelledError(absl::StrCat("launcher: stopped by signal ", signo, " (",
                                                 strsignal(signo), "), forwarded to every rank"));
      stop(signo);
    }
    for (Rank& r : ranks) {
      int status = 0;
      if (!r.running) continue;
      const pid_t got = waitpid(r.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      r.running = false;
      --running;
      // got < 0 (ECHILD): reaped by someone else, so how it ended is unknown: not a success.
      const bool failed = got < 0 || !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && !stopping) {
        const std::string message = RankError(r);
        result = absl::AbortedError(
            absl::StrCat("rank ", first_global_rank + r.rank, " (pid ", r.pid, ") ",
                         got < 0 ? "ended with an unknown status" : HowItEnded(status),
                         message.empty() ? "" : ": ", message));
        stop(SIGTERM);
      }
    }
    if (stopping && !killed && Clock::now() >= kill_at) {
      SignalAll(ranks, SIGKILL);
      killed = true;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace

absl::Status LaunchRanks(const LaunchOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  char dir_template[] = "/tmp/zerotrain-launch-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(absl::StrCat("launcher: mkdtemp in /tmp: ", std::strerror(errno)));
  }
  const std::string dir = dir_template;
  g_signal = 0;
  struct sigaction on_signal {
  }, old_int{}, old_term{}, default_chld{}, old_chld{};
  on_signal.sa_handler = RecordSignal;
  sigemptyset(&on_signal.sa_mask);
  sigaction(SIGINT, &on_signal, &old_int);
  sigaction(SIGTERM, &on_signal, &old_term);
  // An inherited SIGCHLD=SIG_IGN (some CI runners and daemons) would let the kernel reap the
  // ranks before we learn how they ended.
  default_chld.sa_handler = SIG_DFL;
  sigemptyset(&default_chld.sa_mask);
  sigaction(SIGCHLD, &default_chld, &old_chld);

  std::vector<Rank> ranks(options.nproc_per_node);
  absl::Status result;
  for (int i = 0; i < options.nproc_per_node && result.ok(); ++i) {
    ranks[i].rank = i;
    ranks[i].error_file = absl::StrCat(dir, "/rank", i, ".error");
    result = Spawn(options, ranks[i]);
  }
  if (!result.ok()) {
    SignalAll(ranks, SIGKILL);
    for (Rank& r : ranks) {
      if (r.running) waitpid(r.pid, nullptr, 0);
    }
  } else {
    result = Supervise(options, ranks, options.node_rank * options.nproc_per_node);
  }
  // Every rank is gone: a shm segment named after this launcher is an orphan of a rank killed
  // while the job was starting (shm_names.h).
  RemoveOrphanShmSegments(getpid());
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

bool LaunchedByLauncher() { return std::getenv(kLauncherPidVar) != nullptr; }

void DieWithLauncher() {
  const char* launcher = std::getenv(kLauncherPidVar);
  if (launcher == nullptr) return;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died before prctl took effect; then we were re-parented already.
  if (std::to_string(getppid()) != launcher) _exit(1);
}

void ReportRankError(const std::string& message) {
  const char* path = std::getenv(kErrorFileVar);
  if (path == nullptr) return;
  std::ofstream out(path, std::ios::trunc);
  out << message << "\n";
}

}  // namespace zerotrain::comm
