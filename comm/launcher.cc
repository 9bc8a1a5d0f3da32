// The node launcher (see launcher.h): spawn, supervise, forward signals, report the first failure.
#include "comm/launcher.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "comm/rendezvous.h"
#include "comm/shm_names.h"
#include "comm/tcp_port.h"

extern char** environ;

namespace zerotrain::comm {
namespace {

constexpr char kLauncherPidVar[] = "ZT_LAUNCHER_PID";
constexpr char kErrorFileVar[] = "ZT_ERROR_FILE";
constexpr char kJobIdVar[] = "ZT_JOB_ID";
constexpr int kMultiNodePort = 29500;

// Words with which a rank's error says only that other ranks failed: the engine's agreement checks
// ("rank(s) 1 failed (see their errors)"), comm's call check on a dead peer, and a group's latch
// after a failure. Such an error is reported only when no rank gave one of its own.
constexpr absl::string_view kPeerFailureWords[] = {
    "see their errors", "is gone (exited or crashed)", "unusable after an earlier failure",
    "closed the connection"};

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
  if (o.master_port < 0 || o.master_port > 65535) {
    return bad("master_port", std::to_string(o.master_port));
  }
  if (o.master_addr.empty()) return bad("master_addr", "\"\"");
  return absl::OkStatus();
}

// The port the ranks meet at; on the node that hosts the store, checked free before any rank
// starts, so that a port in use is one line at once instead of a rank failing after start-up.
absl::StatusOr<int> StorePort(const LaunchOptions& o) {
  if (o.master_port == 0 && o.nnodes == 1) {
    auto port = PickFreePort();
    if (!port.ok()) return absl::InternalError(absl::StrCat("launcher: ", port.status().message()));
    return *port;
  }
  const int port = o.master_port == 0 ? kMultiNodePort : o.master_port;
  if (o.node_rank != 0) return port;
  if (absl::IsFailedPrecondition(CheckPortFree(port))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launcher: port ", port, " (--master_port) is in use on this machine (another job?); pass ",
        "--master_port=PORT to choose a free one",
        o.nnodes == 1 ? ", or leave it out to get one" : ""));
  }
  return port;
}

// See LaunchOptions::job_id.
std::string JobId(const LaunchOptions& o) {
  if (!o.job_id.empty()) return o.job_id;
  if (const char* id = std::getenv(kJobIdVar); id != nullptr && *id != '\0') return id;
  if (o.nnodes > 1) {
    const std::string id = JobIdFromEnv([](const char* name) { return std::getenv(name); });
    return !id.empty() ? id : absl::StrCat(o.master_addr, ":", o.master_port);
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, 5, "host");
  std::random_device random;
  return absl::StrCat(host, "-", getpid(), "-", absl::Hex(random(), absl::kZeroPad8));
}

bool EchoesPeerFailure(const std::string& message) {
  for (absl::string_view words : kPeerFailureWords) {
    if (absl::StrContains(message, words)) return true;
  }
  return false;
}

// The parent's environment without the variables that place a process in a job (ours replace
// them; getenv would return the first of two), plus this rank's. `o` has the resolved port and
// job id.
std::vector<std::string> RankEnv(const LaunchOptions& o, int local_rank, const std::string& error) {
  constexpr absl::string_view kPlacement[] = {
      "RANK=",         "LOCAL_RANK=",    "WORLD_SIZE=",      "LOCAL_WORLD_SIZE=",
      "MASTER_ADDR=",  "MASTER_PORT=",   "OMPI_COMM_WORLD_", "SLURM_PROCID=",
      "SLURM_NTASKS=", "SLURM_LOCALID=", kErrorFileVar,      "ZT_JOB_ID="};
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
  env.push_back(absl::StrCat(kJobIdVar, "=", o.job_id));
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

struct Failure {
  absl::Status status;
  bool echo = false;  // only reports that other ranks failed
};

// Reaps ranks until all are gone. The first failure (or a forwarded signal) stops the rest; when
// that failure only echoes another rank's, the others get peer_failure_wait to end on their own
// first, and a rank's own error found meanwhile is the one returned.
absl::Status Supervise(const LaunchOptions& o, std::vector<Rank>& ranks, int first_global_rank) {
  using Clock = std::chrono::steady_clock;
  absl::Status cancelled;
  std::optional<Failure> reported;
  bool stopping = false, killed = false;
  Clock::time_point kill_at, stop_at = Clock::time_point::max();
  // A stop the user asked for gives the ranks stop_grace to finish (and save); a failure, grace.
  auto stop = [&](int signo, std::chrono::milliseconds grace) {
    SignalAll(ranks, signo);
    stopping = true;
    kill_at = Clock::now() + grace;
  };
  for (int running = static_cast<int>(ranks.size()); running > 0;) {
    if (const int signo = g_signal; signo != 0 && !stopping) {
      cancelled =
          absl::CancelledError(absl::StrCat("launcher: stopped by signal ", signo, " (",
                                            strsignal(signo), "), forwarded to every rank"));
      stop(signo, std::max(o.grace, o.stop_grace));
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
      if (!failed || stopping) continue;
      if (o.stopped_exit_code != 0 && got > 0 && WIFEXITED(status) &&
          WEXITSTATUS(status) == o.stopped_exit_code) {
        if (cancelled.ok()) {
          cancelled = absl::CancelledError(absl::StrCat(
              "rank ", first_global_rank + r.rank, " (pid ", r.pid,
              ") was stopped by a signal sent to it and exited with code ", o.stopped_exit_code));
        }
        if (stop_at == Clock::time_point::max()) stop_at = Clock::now() + o.peer_failure_wait;
        continue;
      }
      const std::string message = RankError(r);
      Failure f{absl::AbortedError(
                    absl::StrCat("rank ", first_global_rank + r.rank, " (pid ", r.pid, ") ",
                                 got < 0 ? "ended with an unknown status" : HowItEnded(status),
                                 message.empty() ? "" : ": ", message)),
                EchoesPeerFailure(message)};
      if (!reported || (reported->echo && !f.echo)) reported = f;
      if (!f.echo) {
        stop(SIGTERM, o.grace);
      } else if (stop_at == Clock::time_point::max()) {
        stop_at = Clock::now() + std::min(o.peer_failure_wait, o.grace);
      }
    }
    if (!stopping && Clock::now() >= stop_at) {
      stop(SIGTERM, cancelled.ok() ? o.grace : std::max(o.grace, o.stop_grace));
    }
    if (stopping && !killed && Clock::now() >= kill_at) {
      SignalAll(ranks, SIGKILL);
      killed = true;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return reported ? reported->status : cancelled;
}

}  // namespace

absl::Status LaunchRanks(const LaunchOptions& requested) {
  if (absl::Status s = CheckOptions(requested); !s.ok()) return s;
  auto port = StorePort(requested);
  if (!port.ok()) return port.status();
  LaunchOptions options = requested;
  options.master_port = *port;
  options.job_id = JobId(options);
  char dir_template[] = "/tmp/zerotrain-launch-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(absl::StrCat("launcher: mkdtemp in /tmp: ", std::strerror(errno)));
  }
  const std::string dir = dir_template;
  g_signal = 0;
  struct sigaction on_signal {
  }, old_int{}, old_term{}, old_usr1{}, default_chld{}, old_chld{};
  on_signal.sa_handler = RecordSignal;
  sigemptyset(&on_signal.sa_mask);
  sigaction(SIGINT, &on_signal, &old_int);
  sigaction(SIGTERM, &on_signal, &old_term);
  sigaction(SIGUSR1, &on_signal, &old_usr1);  // a batch system's warning before preemption
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
  sigaction(SIGUSR1, &old_usr1, nullptr);
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
  if (const char* path = std::getenv(kErrorFileVar); path != nullptr) {
    std::ofstream out(path, std::ios::trunc);
    out << message << "\n";
  }
  // torchrun's agent reads {"message": ..., "timestamp": ...} from here and shows the message
  // as the failure's root cause.
  if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE"); path != nullptr) {
    std::ofstream out(path, std::ios::trunc);
    const nlohmann::json report = {{"message", absl::StrCat("zerotrain: ", message)},
                                   {"timestamp", std::time(nullptr)}};
    // A message may quote bytes that are not UTF-8 (a path); torchrun must read it whatever.
    out << report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
}

}  // namespace zerotrain::comm
