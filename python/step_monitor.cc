// StepMonitor (step_monitor.h).
#include "python/step_monitor.h"

#include <ATen/ops/tensor.h>

#include <vector>

#include "tools/status_macros.h"

namespace zerotrain::python {

absl::StatusOr<std::unique_ptr<StepMonitor>> StepMonitor::Create(
    const monitor::MetricsOptions& options, comm::ProcessGroup* group,
    const engine::Engine* engine) {
  if (!options.csv && !options.tensorboard) return nullptr;
  std::unique_ptr<monitor::MetricsSink> sink;
  if (group->rank() == 0) {
    const std::vector<std::string> columns = {
        monitor::names::kLoss,          monitor::names::kLr,
        monitor::names::kLossScale,     monitor::names::kGradNorm,
        monitor::names::kSamplesPerSec, monitor::names::kMsPerStep};
    ZT_ASSIGN_OR_RETURN(sink, monitor::MetricsSink::Create(options, columns));
  }
  return std::unique_ptr<StepMonitor>(new StepMonitor(group, engine, std::move(sink)));
}

absl::Status StepMonitor::AfterStep() {
  at::Tensor mean = at::tensor({micro_losses_ ? loss_sum_ / micro_losses_ : 0.0}, at::kDouble);
  loss_sum_ = 0;
  micro_losses_ = 0;
  ZT_RETURN_IF_ERROR(group_->AllReduce(mean, comm::ReduceOp::kAvg));
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  if (sink_ == nullptr) return absl::OkStatus();
  const double loss = mean.item<double>();
  const int64_t step = engine_->optimizer_steps() + engine_->skipped_steps();
  const int64_t batch = engine_->batch().train_batch_size;
  const std::vector<monitor::Scalar> row = {
      {monitor::names::kLoss, loss},
      {monitor::names::kLr, engine_->lr()},
      {monitor::names::kLossScale, engine_->loss_scale()},
      {monitor::names::kGradNorm, engine_->last_grad_norm()},
      {monitor::names::kSamplesPerSec, seconds > 0 ? batch / seconds : 0.0},
      {monitor::names::kMsPerStep, 1e3 * seconds},
  };
  ZT_RETURN_IF_ERROR(sink_->Write(step, row));
  const std::vector<monitor::Scalar> ds = {{monitor::names::kDsTrainLoss, loss},
                                           {monitor::names::kDsLr, engine_->lr()},
                                           {monitor::names::kDsLossScale, engine_->loss_scale()}};
  return sink_->WriteTensorBoardOnly(step * batch, ds);
}

}  // namespace zerotrain::python
