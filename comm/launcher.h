// Launcher: starts the ranks of this node as copies of a program with the rendezvous variables
// set (torchrun's RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
// OMP_NUM_THREADS=1 unless set when more than one rank shares the node), and
// supervises them as torchrun does: SIGINT/SIGTERM (and SIGUSR1) are forwarded to every rank, and
// when one rank fails the others are stopped (SIGTERM, then SIGKILL after a grace period) and the
// launcher returns that rank's own error message, which the rank left in the file named by
// ZT_ERROR_FILE. Each job gets an id (ZT_JOB_ID in every rank), which the rendezvous compares, so
// ranks of two jobs that share a machine never meet; a single-node job picks a free port of its
// own.
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
  // 0: a free port when nnodes == 1 (as torchrun's standalone mode), else 29500. The node that
  // hosts the store (node_rank 0) checks that the port is free before it starts any rank.
  int master_port = 0;
  // The job's id for the rendezvous; "" = ZT_JOB_ID if set, else a new one per launch on one node,
  // and on several nodes Slurm's job (and step) id or else MASTER_ADDR:MASTER_PORT, which every
  // node's launcher can derive alike (set ZT_JOB_ID on every node to name the job yourself).
  std::string job_id;
  std::string program = "/proc/self/exe";  // what each rank runs
  std::vector<std::string> args;           // argv[1..] of every rank
  // How long ranks stopped after a failure get between SIGTERM and SIGKILL.
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  // The same for a stop that was asked for (a SIGINT/SIGTERM/SIGUSR1 forwarded to every rank, or
  // ranks that exited with stopped_exit_code), where ranks may finish a step and save first;
  // never shorter than grace.
  std::chrono::milliseconds stop_grace{std::chrono::seconds(5)};
  // When the first rank to fail says only that other ranks failed ("see their errors"), how long
  // the others are left to end on their own before they are stopped, so that the rank whose
  // error started it is the one reported.
  std::chrono::milliseconds peer_failure_wait{std::chrono::seconds(3)};
  // The exit code with which a rank says it was asked to stop (a signal sent to it directly, not
  // through this launcher) and stopped cleanly; 0: none. Such a rank is not a failure: the others
  // get peer_failure_wait to stop too, and the launch ends Cancelled as if it had been signalled.
  int stopped_exit_code = 0;
};

// Runs this node's ranks and waits for them. OK when every rank exits 0; otherwise Aborted with
// the first failing rank, how it ended and its error message (a rank's own error is preferred to
// one that only echoes another rank's failure); Cancelled when a forwarded SIGINT/SIGTERM ended
// the job, or ranks exited with stopped_exit_code and none failed. Invalid options, and a port in
// use, are InvalidArgument naming the option; no rank is started then.
absl::Status LaunchRanks(const LaunchOptions& options);

// True in a process started by LaunchRanks.
bool LaunchedByLauncher();

// In a rank started by LaunchRanks: asks the kernel to kill it when the launcher dies, so no rank
// outlives a launcher killed with SIGKILL.
void DieWithLauncher();

// In a rank: leaves `message` where the launcher looks for the rank's error, so the launcher can
// report it: ZT_ERROR_FILE (ours) and TORCHELASTIC_ERROR_FILE (torchrun's, as the JSON its agent
// reads, so its "Root Cause" is this line); neither is written when its variable is unset.
void ReportRankError(const std::string& message);

}  // namespace zerotrain::comm
