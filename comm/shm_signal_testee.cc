// The program shm_signal_test starts: run plainly (argv: mode, dir, port) it launches 2 ranks of
// itself and exits 0, 1 (a rank failed) or 3 (stopped by a signal); as a rank it maps a shm
// segment (ShmSegment::Attach) and then exchanges phases until stopped. In mode "startup" rank 1
// never attaches, so rank 0 stays in the window between creating the segment and every rank
// mapping it. Ranks remove a pending segment on SIGTERM (as //trainer:main's do) and exit 3.
#include <signal.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "comm/backend.h"
#include "comm/launcher.h"
#include "comm/rendezvous.h"
#include "comm/shm_names.h"
#include "comm/shm_segment.h"

namespace zerotrain::comm {
namespace {

void OnTerm(int) {
  UnlinkPendingShmSegment();
  _exit(3);
}

int RunRank(const std::string& mode, const std::string& dir) {
  DieWithLauncher();
  signal(SIGTERM, OnTerm);
  auto info = RendezvousFromEnv();
  if (!info.ok()) return 5;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(info->master_port);
  so.isServer = info->rank == 0;
  so.numWorkers = info->world_size;
  so.timeout = std::chrono::seconds(60);
  BackendContext ctx;
  ctx.store = c10::make_intrusive<c10d::TCPStore>(info->master_addr, so);
  ctx.rank = info->rank;
  ctx.world_size = info->world_size;
  ctx.master_addr = info->master_addr;
  ctx.timeout = std::chrono::seconds(60);
  if (mode == "startup" && info->rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 4;
  }
  auto segment = ShmSegment::Attach(ctx, 4096);
  if (!segment.ok()) {
    std::fprintf(stderr, "%s\n", segment.status().ToString().c_str());
    return 1;
  }
  std::ofstream(dir + "/rank" + std::to_string(info->rank) + ".attached") << getpid();
  for (;;) {
    const uint32_t phase = (*segment)->Arrive();
    const absl::Status s = (*segment)->WaitAll(
        phase, std::chrono::steady_clock::now() + std::chrono::seconds(60), "the test's loop");
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
}

}  // namespace
}  // namespace zerotrain::comm

int main(int argc, char** argv) {
  if (argc < 4) return 5;
  if (zerotrain::comm::LaunchedByLauncher()) return zerotrain::comm::RunRank(argv[1], argv[2]);
  zerotrain::comm::LaunchOptions options;
  options.nproc_per_node = 2;
  int port = 0;
  if (!absl::SimpleAtoi(argv[3], &port)) return 5;
  options.master_port = port;
  options.grace = std::chrono::seconds(2);
  options.args = {argv[1], argv[2], argv[3]};
  const absl::Status s = zerotrain::comm::LaunchRanks(options);
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  if (s.ok()) return 0;
  return absl::IsCancelled(s) ? 3 : 1;
}
