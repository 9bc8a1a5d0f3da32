// PeerProbe: which peers are still answering, asked when a transfer has timed out. Gloo's own
// timeout ("Timed out waiting N ms for recv operation to complete") does not say which peer it
// waited for, and in a ring every live rank waits too. A live rank answers a ping from a thread
// of its own even while it waits in the same collective; a stopped process (SIGSTOP, a debugger)
// or one behind a cut link does not. So the ranks that stay silent are the ones to name.
//
// One UDP socket per group, on the address the rank advertises (local_route.h); pings are resent
// every 100 ms while waiting, so a lost datagram is not taken for a silent peer.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/backend.h"

namespace zerotrain::comm {

class PeerProbe {
 public:
  // Binds on `address`, publishes the port in ctx.store and reads every peer's (bounded by
  // ctx.timeout), then answers pings until destroyed.
  static absl::StatusOr<std::unique_ptr<PeerProbe>> Connect(const BackendContext& ctx,
                                                            const std::string& address);
  ~PeerProbe();

  // The peers that did not answer within `wait`, in rank order.
  std::vector<int> Silent(std::chrono::milliseconds wait);

 private:
  PeerProbe(int rank, int fd, std::vector<sockaddr_in> peers);
  void Serve();

  const int rank_;
  const int fd_;
  const std::vector<sockaddr_in> peers_;  // by rank; this rank's entry unused
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable answered_cv_;
  uint64_t nonce_ = 0;          // of the current probe
  std::vector<bool> answered_;  // by rank, for nonce_
  std::thread server_;          // last: starts once the rest is built
};

}  // namespace zerotrain::comm
