// Work: the handle an asynchronous collective returns. Waiting runs the op's completion steps in
// order (call check, the transfer itself, copy-out), each bounded by the group's timeout, and
// turns any failure into one Status that names the op, its sequence number, the rank and the world.
// A consumer that only needs the result on its device stream calls WaitOnStream instead: where the
// transfer runs on a stream (NCCL) the host does not block, and a later Wait reports the outcome.
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
  // on_stream[i], where set, is steps[i]'s device-side form (same length as steps, or empty).
  Work(OpDesc op, std::vector<Step> steps, std::vector<Step> on_stream, FailureSink on_failure);

  // Blocks until the op is complete. Safe to call more than once; later calls return the same
  // Status without waiting.
  absl::Status Wait();

  // Orders the caller's current device stream after the op, blocking the host only for the steps
  // that have no device-side form (on CPU backends that is all of them: the same as Wait). The
  // host checks deferred this way (completion, errors, the timeout) run at the next Wait, which
  // every caller must still make before it reads the result on the host or reuses the buffers
  // from another stream. Returns the error of a step it ran; OK says nothing of deferred ones.
  absl::Status WaitOnStream();

  const OpDesc& op() const;

 private:
  struct State {
    OpDesc op;
    std::vector<Step> steps;
    std::vector<Step> on_stream;
    std::vector<Step> deferred;  // host checks WaitOnStream left for Wait
    FailureSink on_failure;
    std::mutex mu;
    bool done = false;
    absl::Status result;
  };
  // Runs steps (or their stream forms, when `stream`) until one fails; state_->mu is held.
  void Run(bool stream);
  void Fail(const absl::Status& status);
  std::shared_ptr<State> state_;
};

// `status` with the op's context: "comm: <Describe(op)> failed: <message>".
absl::Status WithOpContext(const OpDesc& op, const absl::Status& status);

// Waits for every handle, returns the first error (all are waited for even after one fails).
absl::Status WaitAll(std::vector<Work>& works);

}  // namespace zerotrain::comm
