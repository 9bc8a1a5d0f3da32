// Work handles: runs completion steps once and words their errors with the op's context.
#include "comm/work.h"

#include "absl/strings/str_cat.h"

namespace zerotrain::comm {

Work::Work(OpDesc op, std::vector<Step> steps, FailureSink on_failure)
    : state_(std::make_shared<State>()) {
  state_->op = op;
  state_->steps = std::move(steps);
  state_->on_failure = std::move(on_failure);
}

const OpDesc& Work::op() const {
  static const OpDesc kNone;
  return state_ ? state_->op : kNone;
}

absl::Status Work::Wait() {
  if (!state_) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->done) return state_->result;
  for (Step& step : state_->steps) {
    absl::Status s = step();
    if (!s.ok()) {
      state_->result = WithOpContext(state_->op, s);
      if (state_->on_failure) state_->on_failure(state_->result);
      break;
    }
  }
  state_->done = true;
  state_->steps.clear();  // drop the tensors the steps hold
  return state_->result;
}

absl::Status WithOpContext(const OpDesc& op, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("comm: ", Describe(op), " failed: ", status.message()));
}

absl::Status WaitAll(std::vector<Work>& works) {
  absl::Status first;
  for (Work& w : works) {
    absl::Status s = w.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace zerotrain::comm
