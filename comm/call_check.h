// CallCheck: before each collective the ranks exchange what they are about to call (sequence
// number, op, reduction, dtype, count, root) over a small Gloo group of its own, and the transfer
// starts only after they agree. When they do not, every rank gets an error naming both calls
// instead of corrupted data, a hang, or Gloo's process abort on a size mismatch.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <memory>

#include "absl/status/statusor.h"
#include "comm/backend.h"

namespace c10d {
class Backend;
}  // namespace c10d

namespace zerotrain::comm {

class CallCheck {
 public:
  static absl::StatusOr<std::unique_ptr<CallCheck>> Connect(const BackendContext& ctx);
  explicit CallCheck(c10::intrusive_ptr<c10d::Backend> pg, std::chrono::milliseconds timeout);
  ~CallCheck();

  // Starts the exchange for `op`; the step waits for it and compares every rank's call with ours.
  absl::StatusOr<Work::Step> Start(const OpDesc& op);

 private:
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::chrono::milliseconds timeout_;
};

}  // namespace zerotrain::comm
