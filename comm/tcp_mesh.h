// TcpMesh: one TCP connection between every pair of ranks, set up through the group's store, for
// small control messages sent and received on the calling thread (the call check). Not for bulk
// data: that goes through a Backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/backend.h"

namespace zerotrain::comm {

class TcpMesh {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Each rank listens on an ephemeral port, publishes host:port in ctx.store, connects to every
  // higher rank and accepts the lower ones; bounded by ctx.timeout.
  static absl::StatusOr<std::unique_ptr<TcpMesh>> Connect(const BackendContext& ctx);
  ~TcpMesh();

  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(fds_.size()); }

  // Aborted when the peer's connection is gone (it exited or crashed).
  absl::Status Send(int peer, const void* data, size_t size);
  // DeadlineExceeded when nothing complete arrived by `deadline`; Aborted when the peer closed.
  absl::Status Recv(int peer, void* data, size_t size, Deadline deadline);

 private:
  TcpMesh(int rank, std::vector<int> fds) : rank_(rank), fds_(std::move(fds)) {}

  int rank_;
  std::vector<int> fds_;  // by rank; -1 for this rank
};

}  // namespace zerotrain::comm
