// Local rank launcher for benchmarks (see local_ranks.h).
#include "comm/local_ranks.h"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace zerotrain::comm {
namespace {

constexpr char kLaunchedVar[] = "ZT_LOCAL_RANK_LAUNCHED";

std::vector<std::string> RankEnv(int rank, int world_size, int master_port) {
  // Inherited rendezvous variables (a launcher run under torchrun or Slurm) would shadow ours:
  // getenv returns the first match.
  constexpr absl::string_view kOurs[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "MASTER_ADDR=",
                                         "MASTER_PORT="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view kv(*e);
    bool ours = false;
    for (absl::string_view prefix : kOurs) ours = ours || absl::StartsWith(kv, prefix);
    if (!ours) env.emplace_back(kv);
  }
  // ATen's OpenMP threads spin after each parallel region and starve the other ranks' network
  // threads when ranks share cores (docs/COMM.md).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) env.push_back("OMP_NUM_THREADS=1");
  env.push_back(absl::StrCat(kLaunchedVar, "=1"));
  env.push_back(absl::StrCat("RANK=", rank));
  env.push_back(absl::StrCat("LOCAL_RANK=", rank));
  env.push_back(absl::StrCat("WORLD_SIZE=", world_size));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(absl::StrCat("MASTER_PORT=", master_port));
  return env;
}

}  // namespace

absl::Status RunLocalRanks(int world_size, int master_port, const std::vector<std::string>& args) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<std::string> env = RankEnv(rank, world_size, master_port);
    std::vector<std::string> argv_storage = {"/proc/self/exe"};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> envp, argv;
    for (std::string& s : env) envp.push_back(s.data());
    for (std::string& s : argv_storage) argv.push_back(s.data());
    envp.push_back(nullptr);
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      return absl::InternalError(absl::StrCat("could not start rank ", rank));
    }
    pids.push_back(pid);
  }
  absl::Status first;
  for (int rank = 0; rank < world_size; ++rank) {
    int status = 0;
    while (waitpid(pids[rank], &status, 0) < 0 && errno == EINTR) {
    }
    if (first.ok() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      first = absl::AbortedError(
          WIFSIGNALED(status)
              ? absl::StrCat("rank ", rank, " died from signal ", WTERMSIG(status))
              : absl::StrCat("rank ", rank, " exited with code ", WEXITSTATUS(status)));
    }
  }
  return first;
}

bool LaunchedAsLocalRank() { return std::getenv(kLaunchedVar) != nullptr; }

void DieWithLauncher() {
  if (LaunchedAsLocalRank()) prctl(PR_SET_PDEATHSIG, SIGKILL);
}

}  // namespace zerotrain::comm
