// StopSignal: how a rank of //trainer:main ends on SIGTERM, SIGINT or SIGUSR1 (sent by a user, a
// batch system, or our launcher forwarding its own). The handler only records the signal and wakes
// a watchdog; the training loop sees the request between steps, every rank stops after the same
// step (the request rides on the per-step loss all-reduce), saves a checkpoint at that step
// (run.save_on_stop), and the rank unwinds normally, so destructors release shared memory, swap
// files and temporaries, and exits 3. If it has not ended within the grace period from the signal
// (run.stop_timeout_s: a step and a save too slow, or a wait on a peer that is gone), the watchdog
// removes the name of a shared-memory segment still being set up (comm/shm_names.h) and ends it
// with _exit(3): no hang, nothing left in /dev/shm.
#pragma once

#include <chrono>

namespace zerotrain::trainer {

inline constexpr int kStoppedExitCode = 3;
// How the Cancelled status of a clean stop begins ("stopped after step 12 on request (signal 15,
// Terminated); the last checkpoint is ...").
inline constexpr char kStoppedPrefix[] = "stopped after step ";

// Installs the handlers and starts the watchdog (once per process; later calls change nothing).
// `grace` must stay below the launcher's SIGTERM-to-SIGKILL grace for a requested stop
// (comm::LaunchOptions::stop_grace).
void InstallStopSignalHandlers(std::chrono::milliseconds grace = std::chrono::seconds(4));

// The signal that asked this process to stop, 0 when none has.
int StopSignalReceived();

}  // namespace zerotrain::trainer
