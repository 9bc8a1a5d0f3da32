// StepClock's lap accounting, and its two clocks: the host's steady clock, and c10::Event (the
// device-generic event of LibTorch, a cudaEvent on CUDA) recorded on the device's current stream.
#include "engine/step_clock.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>

namespace zerotrain::engine {
namespace {

double* Field(StepTimes& t, StepPhase phase) {
  switch (phase) {
    case StepPhase::kForward:
      return &t.forward;
    case StepPhase::kBackward:
      return &t.backward;
    case StepPhase::kBackwardComm:
      return &t.backward_comm;
    case StepPhase::kStep:
      return &t.step;
    case StepPhase::kAllgather:
      return &t.allgather;
    case StepPhase::kUntimed:
      break;
  }
  return nullptr;
}

class HostClock : public StepClock {
 protected:
  void Record() override {
    marks_.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
  }
  double Seconds(size_t from, size_t to) override { return marks_[to] - marks_[from]; }
  void WaitFor(size_t) override {}
  void Forget(size_t count) override { marks_.erase(marks_.begin(), marks_.begin() + count); }

 private:
  std::vector<double> marks_;
};

// Events are made lazily by their first record, with timing on (BACKEND_DEFAULT); a step makes
// a handful, so they are not pooled.
class EventClock : public StepClock {
 public:
  explicit EventClock(c10::Device device) : device_(device), guard_(device.type()) {}

 protected:
  void Record() override {
    marks_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
    marks_.back().record(guard_.getStream(device_));
  }
  double Seconds(size_t from, size_t to) override {
    return marks_[from].elapsedTime(marks_[to]) / 1e3;  // milliseconds
  }
  void WaitFor(size_t mark) override { marks_[mark].synchronize(); }
  void Forget(size_t count) override { marks_.erase(marks_.begin(), marks_.begin() + count); }

 private:
  c10::Device device_;
  c10::impl::VirtualGuardImpl guard_;
  std::vector<c10::Event> marks_;
};

}  // namespace

std::unique_ptr<StepClock> StepClock::ForDevice(c10::Device device) {
  if (device.is_cpu()) return std::make_unique<HostClock>();
  return std::make_unique<EventClock>(device);
}

void StepClock::Lap(StepPhase phase) {
  Record();
  if (++marks_ > 1) phases_.push_back(phase);
}

void StepClock::EndStep() {
  // A step ended and never read: its events are long past; resolve it before it is replaced.
  if (unread_) (void)LastStep();
  ended_marks_ = marks_;
  unread_ = marks_ > 0;
}

const StepTimes& StepClock::LastStep() {
  if (!unread_) return last_;
  last_ = StepTimes();
  if (ended_marks_ > 1) {
    WaitFor(ended_marks_ - 1);
    for (size_t i = 0; i + 1 < ended_marks_; ++i) {
      if (double* f = Field(last_, phases_[i])) *f += Seconds(i, i + 1);
    }
  }
  // The step's last mark starts the next step's first phase: keep it.
  const size_t drop = ended_marks_ - 1;
  Forget(drop);
  phases_.erase(phases_.begin(), phases_.begin() + drop);
  marks_ -= drop;
  unread_ = false;
  return last_;
}

}  // namespace zerotrain::engine
