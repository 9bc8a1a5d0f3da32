// StopSignal: how a rank of //trainer:main ends on SIGTERM or SIGINT (sent by a user, a batch
// system, or our launcher forwarding its own). The handler only records the signal, removes a
// shared-memory segment still being set up (comm/shm_names.h) and wakes a watchdog; the training
// loop sees the request between steps, every rank stops after the same step (the request rides
// on the per-step loss all-reduce), and the rank unwinds normally, so destructors release shared
// memory, swap files and temporaries, and exits 3. If unwinding has not ended the process within
// the grace period (a wait on a peer that is gone), the watchdog ends it with _exit(3): no hang.
#pragma once

#include <chrono>

namespace zerotrain::trainer {

inline constexpr int kStoppedExitCode = 3;
// How the Cancelled status of a clean stop begins ("stopped after step 12 by signal 15 ...").
inline constexpr char kStoppedPrefix[] = "stopped after step ";

// Installs the handlers and starts the watchdog (once per process; later calls change nothing).
// `grace` must stay below the launcher's SIGTERM-to-SIGKILL grace (5 s).
void InstallStopSignalHandlers(std::chrono::milliseconds grace = std::chrono::seconds(4));

// The signal that asked this process to stop, 0 when none has.
int StopSignalReceived();

}  // namespace zerotrain::trainer
