// StopSignal: the async-signal-safe handler, and the watchdog thread that bounds the unwinding.
#include "trainer/stop_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "comm/shm_names.h"

namespace zerotrain::trainer {
namespace {

volatile sig_atomic_t g_signal = 0;
int g_wake[2] = {-1, -1};  // the handler writes one byte; the watchdog reads it

void OnStopSignal(int signo) {
  const int saved_errno = errno;
  if (g_signal == 0) g_signal = signo;
  const char byte = 1;
  (void)!write(g_wake[1], &byte, 1);
  errno = saved_errno;
}

void Watchdog(std::chrono::milliseconds grace) {
  char byte = 0;
  while (read(g_wake[0], &byte, 1) < 0 && errno == EINTR) {
  }
  std::this_thread::sleep_for(grace);
  // Still here: the unwinding is stuck. Dying by the signal itself would say less. Only now may a
  // segment still being set up lose its name: the process goes on after the handler, and a peer
  // that has yet to open the segment would fail, leaving rank 0 waiting for it to attach.
  comm::UnlinkPendingShmSegment();
  _exit(kStoppedExitCode);
}

}  // namespace

void InstallStopSignalHandlers(std::chrono::milliseconds grace) {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  if (pipe2(g_wake, O_CLOEXEC) != 0) g_wake[0] = g_wake[1] = -1;
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the loop polls the flag; interrupted I/O need not fail
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);  // a batch system's warning before preemption
  if (g_wake[0] >= 0) std::thread(Watchdog, grace).detach();
}

int StopSignalReceived() { return g_signal; }

}  // namespace zerotrain::trainer
