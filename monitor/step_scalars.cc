// StepScalars (step_scalars.h).
#include "monitor/step_scalars.h"

#include "monitor/metrics_sink.h"

namespace zerotrain::monitor {

std::vector<std::string> StepColumns() {
  return {names::kLoss,          names::kLr,       names::kLossScale, names::kGradNorm,
          names::kSamplesPerSec, names::kMsPerStep};
}

std::vector<Scalar> StepScalars(const StepValues& v) {
  const double samples = static_cast<double>(v.train_batch_size);
  return {
      {names::kLoss, v.loss},
      {names::kLr, v.lr},
      {names::kLossScale, v.loss_scale},
      {names::kGradNorm, v.grad_norm},
      {names::kSamplesPerSec, v.seconds > 0 ? samples / v.seconds : 0.0},
      {names::kMsPerStep, 1e3 * v.seconds},
  };
}

std::vector<Scalar> DeepSpeedScalars(const StepValues& v) {
  std::vector<Scalar> ds = {{names::kDsTrainLoss, v.loss}, {names::kDsLr, v.lr}};
  if (v.fp16) ds.push_back({names::kDsLossScale, v.loss_scale});
  return ds;
}

}  // namespace zerotrain::monitor
