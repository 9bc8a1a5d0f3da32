// StepClock: how long each phase of an optimizer step took where it ran. On CPU a phase is host
// time; on an accelerator it is the time between events recorded on the current stream, so
// forward, backward and the optimizer are what the device spent, not how long the host took to
// queue them (the host runs ahead of a GPU, and its clock would mostly time the launches).
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <vector>

namespace zerotrain::engine {

// Seconds of one optimizer step's micro-batches, summed over them.
struct StepTimes {
  double forward = 0;        // from the engine's previous call to Backward: the caller's forward
  double backward = 0;       // autograd, including reductions started by its hooks
  double backward_comm = 0;  // reductions finished (or started and finished) after autograd
  double step = 0;           // overflow check, clipping norm, optimizer
  double allgather = 0;      // stage 1/2 parameter all-gather; stage 3 persistent ones
};

enum class StepPhase { kUntimed, kForward, kBackward, kBackwardComm, kStep, kAllgather };

class StepClock {
 public:
  // Host time for CPU devices; timing events on the current stream of `device` elsewhere.
  static std::unique_ptr<StepClock> ForDevice(c10::Device device);
  virtual ~StepClock() = default;

  // Marks the current point; the time since the previous mark was spent in `phase`. The first
  // mark only starts the timeline.
  void Lap(StepPhase phase);
  // The laps so far make up one optimizer step; the next lap starts the next one.
  void EndStep();
  // The last ended step's times (zero before the first). On a device this waits until the
  // device reached that step's end, once per step: call it after the work it times was queued.
  const StepTimes& LastStep();

 protected:
  // Marks are numbered in the order recorded; Forget renumbers the ones kept from 0.
  virtual void Record() = 0;
  virtual double Seconds(size_t from, size_t to) = 0;  // from's mark to to's (to is later)
  virtual void WaitFor(size_t mark) = 0;               // until the device reached it
  virtual void Forget(size_t count) = 0;               // drops the first `count` marks

 private:
  size_t marks_ = 0;               // recorded and not forgotten
  std::vector<StepPhase> phases_;  // phases_[i]: the phase that ended at mark i + 1
  size_t ended_marks_ = 0;         // marks (from 0) that belong to the ended, unread step
  bool unread_ = false;
  StepTimes last_;
};

}  // namespace zerotrain::engine
