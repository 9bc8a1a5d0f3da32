// The program launcher_test starts: run plainly, it launches 2 ranks of itself with LaunchRanks
// (global ranks 2 and 3 of 4 on port 29123, or in mode "standalone" ranks 0 and 1 of a one-node
// job on a port of the launcher's choosing) and exits 0 (all ranks fine), 1 (a rank failed) or 3
// (stopped by a signal, or every rank that ended did so with kStopped), printing the launcher's
// error; as a rank it does what argv[1] says, leaving evidence in the directory argv[2].
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "comm/launcher.h"

namespace {

std::string g_dir;
// The handler's files, "<dir>/rank<R>.got<signal>", named before the handler is installed: a
// signal handler may call only async-signal-safe functions (open, close, _exit).
std::string g_got_sigint, g_got_sigterm;

// The exit code of a rank that stopped cleanly on its own signal (LaunchOptions'
// stopped_exit_code); "fail" mode's exit 3 is then a failure like any other.
constexpr int kStopped = 7;

void Write(const std::string& name, const std::string& text) {
  std::ofstream(g_dir + "/" + name) << text;
}

void OnSignal(int signo) {
  const int fd = open((signo == SIGINT ? g_got_sigint : g_got_sigterm).c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
  _exit(0);
}

int RunRank(const std::string& mode) {
  zerotrain::comm::DieWithLauncher();
  const std::string rank = std::getenv("RANK");
  if (mode == "ok") {
    Write("rank" + rank + ".env",
          std::string(std::getenv("RANK")) + " " + std::getenv("LOCAL_RANK") + " " +
              std::getenv("WORLD_SIZE") + " " + std::getenv("LOCAL_WORLD_SIZE") + " " +
              std::getenv("MASTER_ADDR") + " " + std::getenv("MASTER_PORT") + " " +
              std::getenv("OMP_NUM_THREADS"));
    return 0;
  }
  if (mode == "standalone") {
    Write("rank" + rank + ".port", std::getenv("MASTER_PORT"));
    Write("rank" + rank + ".job", std::getenv("ZT_JOB_ID"));
    return 0;
  }
  // "stopped": both ranks stop cleanly, as if each had been sent SIGTERM directly, 300 ms apart.
  if (mode == "stopped") {
    if (std::string(std::getenv("LOCAL_RANK")) == "1") {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    return kStopped;
  }
  // "echo": the first rank to fail only reports the other's failure, as the engine's agreement
  // checks do; the rank that failed on its own ends 300 ms later.
  if (mode == "echo" && std::string(std::getenv("LOCAL_RANK")) == "0") {
    zerotrain::comm::ReportRankError(
        "Engine::Create on rank 2: rank(s) 3 failed (see their errors)");
    return 1;
  }
  if ((mode == "fail" || mode == "echo") && std::string(std::getenv("LOCAL_RANK")) == "1") {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    zerotrain::comm::ReportRankError("could not open /data/shard7: No such file");
    return 3;
  }
  // "fail" (other ranks) and "wait": block until a signal arrives or the test gives up.
  g_got_sigint = g_dir + "/rank" + rank + ".got" + std::to_string(SIGINT);
  g_got_sigterm = g_dir + "/rank" + rank + ".got" + std::to_string(SIGTERM);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  Write("rank" + rank + ".ready", "");
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 5;
  g_dir = argv[2];
  if (zerotrain::comm::LaunchedByLauncher()) return RunRank(argv[1]);
  zerotrain::comm::LaunchOptions options;
  options.nproc_per_node = 2;
  if (std::string(argv[1]) != "standalone") {
    options.nnodes = 2;
    options.node_rank = 1;  // global ranks 2 and 3 of 4
    options.master_port = 29123;
  }
  options.grace = std::chrono::seconds(2);
  options.stopped_exit_code = kStopped;
  options.args = {argv[1], argv[2]};
  const absl::Status s = zerotrain::comm::LaunchRanks(options);
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  if (s.ok()) return 0;
  return absl::IsCancelled(s) ? 3 : 1;
}
