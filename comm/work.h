// Work: the handle an asynchronous collective returns. Waiting runs the op's completion steps in
// order (call check, the transfer itself, copy-out), each bounded by the group's timeout, and
// turns any failure into one Status that names the op, its sequence number, the rank and the world.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "comm/types.h"

namespace zerotrain::comm {

class Work {
 public:
  // One completion step; returns when its part is done or failed (never later than the timeout).
  using Step = std::function<absl::Status()>;
  // Told of the first failure of any op, so the group can refuse later calls.
  using FailureSink = std::function<void(const absl::Status&)>;

  // An already finished, successful op.
  Work() = default;
  Work(OpDesc op, std::vector<Step> steps, FailureSink on_failure);

  // Blocks until the op is complete. Safe to call more than once; later calls return the same
  // Status without waiting.
  absl::Status Wait();

  const OpDesc& op() const;

 private:
  struct State {
    OpDesc op;
    std::vector<Step> steps;
    FailureSink on_failure;
    std::mutex mu;
    bool done = false;
    absl::Status result;
  };
  std::shared_ptr<State> state_;
};

// `status` with the op's context: "comm: <Describe(op)> failed: <message>".
absl::Status WithOpContext(const OpDesc& op, const absl::Status& status);

// Waits for every handle, returns the first error (all are waited for even after one fails).
absl::Status WaitAll(std::vector<Work>& works);

}  // namespace zerotrain::comm
