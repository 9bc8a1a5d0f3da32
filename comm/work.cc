// Work handles: runs completion steps once and words their errors with the op's context.
#include "comm/work.h"

#include "absl/strings/str_cat.h"

namespace zerotrain::comm {

Work::Work(OpDesc op, std::vector<Step> steps, FailureSink on_failure)
    : Work(op, std::move(steps), {}, std::move(on_failure)) {}

Work::Work(OpDesc op, std::vector<Step> steps, std::vector<Step> on_stream, FailureSink on_failure)
    : state_(std::make_shared<State>()) {
  state_->op = op;
  state_->steps = std::move(steps);
  state_->on_stream = std::move(on_stream);
  state_->on_stream.resize(state_->steps.size());
  state_->on_failure = std::move(on_failure);
}

const OpDesc& Work::op() const {
  static const OpDesc kNone;
  return state_ ? state_->op : kNone;
}

void Work::Fail(const absl::Status& status) {
  state_->result = WithOpContext(state_->op, status);
  if (state_->on_failure) state_->on_failure(state_->result);
}

void Work::Run(bool stream) {
  for (size_t i = 0; i < state_->steps.size(); ++i) {
    const bool on_stream = stream && state_->on_stream[i];
    absl::Status s = on_stream ? state_->on_stream[i]() : state_->steps[i]();
    if (!s.ok()) {
      Fail(s);
      break;
    }
    if (on_stream) state_->deferred.push_back(std::move(state_->steps[i]));
  }
  state_->done = true;
  state_->steps.clear();  // drop the tensors the steps hold
  state_->on_stream.clear();
}

absl::Status Work::Wait() {
  if (!state_) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) Run(/*stream=*/false);
  std::vector<Step> deferred = std::move(state_->deferred);
  state_->deferred.clear();
  for (Step& step : deferred) {
    if (!state_->result.ok()) break;
    absl::Status s = step();
    if (!s.ok()) Fail(s);
  }
  return state_->result;
}

absl::Status Work::WaitOnStream() {
  if (!state_) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) Run(/*stream=*/true);
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
