// Launcher: starts the ranks of this node as copies of a program with the rendezvous variables
// set (torchrun's RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
// OMP_NUM_THREADS=1 unless set when more than one rank shares the node), and
// supervises them as torchrun does: SIGINT/SIGTERM are forwarded to every rank, and when one rank
// fails the others are stopped (SIGTERM, then SIGKILL after a grace period) and the launcher
// returns that rank's own error message, which the rank left in the file named by ZT_ERROR_FILE.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zerotrain::comm {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string program = "/proc/self/exe";  // what each rank runs
  std::vector<std::string> args;           // argv[1..] of every rank
  // How long stopped ranks get between SIGTERM and SIGKILL.
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
};

// Runs this node's ranks and waits for them. OK when every rank exits 0; otherwise Aborted with
// the first failing rank, how it ended and its error message; Cancelled when a forwarded
// SIGINT/SIGTERM ended the job. Invalid options are InvalidArgument naming the option.
absl::Status LaunchRanks(const LaunchOptions& options);

// True in a process started by LaunchRanks.
bool LaunchedByLauncher();

// In a rank started by LaunchRanks: asks the kernel to kill it when the launcher dies, so no rank
// outlives a launcher killed with SIGKILL.
void DieWithLauncher();

// In a rank: leaves `message` where the launcher looks for the rank's error (ZT_ERROR_FILE), so
// the launcher can report it; a no-op when the variable is unset.
void ReportRankError(const std::string& message);

}  // namespace zerotrain::comm
