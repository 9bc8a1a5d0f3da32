// StepMonitor: the config's csv_monitor and tensorboard sections for a Python script, as
// //trainer:main writes them (monitor/step_scalars.h): after each optimizer step the step's loss
// (the mean of its micro-batches' losses over every rank), lr, loss scale, gradient norm and
// throughput, one CSV row per step, and DeepSpeed's own tags (Train/Samples/train_loss, ...)
// indexed by samples seen.
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "monitor/metrics_options.h"
#include "monitor/metrics_sink.h"

namespace zerotrain::python {

class StepMonitor {
 public:
  // Null when both monitors are off. Collective (every rank gets one, rank 0 the files). `fp16`:
  // the engine's precision is fp16 (DeepSpeed's loss-scale tag is written then only).
  static absl::StatusOr<std::unique_ptr<StepMonitor>> Create(const monitor::MetricsOptions& options,
                                                             comm::ProcessGroup* group,
                                                             const engine::Engine* engine,
                                                             bool fp16);

  void AddMicroLoss(double loss) {
    loss_sum_ += loss;
    ++micro_losses_;
  }
  // After Engine::Step at an accumulation boundary: collective (the loss's mean over the ranks).
  absl::Status AfterStep();

 private:
  StepMonitor(comm::ProcessGroup* group, const engine::Engine* engine, bool fp16,
              std::unique_ptr<monitor::MetricsSink> sink)
      : group_(group), engine_(engine), fp16_(fp16), sink_(std::move(sink)) {}

  comm::ProcessGroup* group_;
  const engine::Engine* engine_;
  bool fp16_;
  std::unique_ptr<monitor::MetricsSink> sink_;  // rank 0's; null elsewhere
  double loss_sum_ = 0;
  int64_t micro_losses_ = 0;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace zerotrain::python
