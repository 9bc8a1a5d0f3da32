// StepScalars: what every training loop on the engine reports after an optimizer step (loss, lr,
// loss scale, gradient norm, throughput) as the monitors' scalars, and DeepSpeed's own tags for
// the same step. //trainer:main's RunReport and the Python front end's StepMonitor both write
// them, so a run's CSV columns and TensorBoard tags are the same from C++ and from Python.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "monitor/scalar.h"

namespace zerotrain::monitor {

struct StepValues {
  double loss = 0;               // the step's loss: its micro-batches' mean over every rank
  double lr = 0;                 // the lr the step ran with
  double loss_scale = 1;         // fp16's scale; 1 at other precisions
  double grad_norm = 0;          // global L2 norm; inf on a skipped step
  double seconds = 0;            // the step's wall time, > 0
  int64_t train_batch_size = 0;  // samples per step over every rank
  bool fp16 = false;
};

// The columns StepScalars fills, in its order: loss, lr, loss_scale, grad_norm,
// samples_per_sec, ms_per_step (a writer's CSV header lists them with its own).
std::vector<std::string> StepColumns();
std::vector<Scalar> StepScalars(const StepValues& v);

// DeepSpeed's monitor tags for the step, which its monitor writes to TensorBoard indexed by
// samples seen: Train/Samples/train_loss and lr, and loss_scale with fp16 only, as DeepSpeed does.
std::vector<Scalar> DeepSpeedScalars(const StepValues& v);

}  // namespace zerotrain::monitor
