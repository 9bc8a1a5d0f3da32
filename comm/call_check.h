// CallCheck: before each collective every rank tells every other what it is about to call
// (sequence number, op, reduction, dtype, count, root), and the transfer starts only once all
// agree. When they do not, every rank gets an error naming both calls instead of corrupted data,
// a hang, or Gloo's process abort on a size mismatch.
//
// The exchange runs on a TcpMesh of its own: one 48-byte message to and from each peer, sent and
// received on the thread that calls Agree (ProcessGroup's launcher thread with Gloo), so the
// check costs one round trip and no further thread hand-offs. A
// peer that exits closes its connections, so the others learn of it at their next call.
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "comm/backend.h"
#include "comm/tcp_mesh.h"

namespace zerotrain::comm {

class CallCheck {
 public:
  static absl::StatusOr<std::unique_ptr<CallCheck>> Connect(const BackendContext& ctx);

  // OK when every rank's call equals `op`; otherwise FailedPrecondition naming the first differing
  // rank's call, DeadlineExceeded naming every rank that did not call within the timeout (a
  // stopped or hung process, a cut link), or Aborted naming a rank whose connection closed.
  absl::Status Agree(const OpDesc& op);

 private:
  CallCheck(std::unique_ptr<TcpMesh> mesh, std::chrono::milliseconds timeout)
      : mesh_(std::move(mesh)), timeout_(timeout) {}

  std::unique_ptr<TcpMesh> mesh_;
  std::chrono::milliseconds timeout_;
};

}  // namespace zerotrain::comm
