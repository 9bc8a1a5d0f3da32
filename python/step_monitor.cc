// StepMonitor (step_monitor.h).
#include "python/step_monitor.h"

#include <ATen/ops/tensor.h>

#include <vector>

#include "monitor/step_scalars.h"
#include "tools/status_macros.h"

namespace zerotrain::python {

absl::StatusOr<std::unique_ptr<StepMonitor>> StepMonitor::Create(
    const monitor::MetricsOptions& options, comm::ProcessGroup* group, const engine::Engine* engine,
    bool fp16) {
  if (!options.csv && !options.tensorboard) return nullptr;
  std::unique_ptr<monitor::MetricsSink> sink;
  if (group->rank() == 0) {
    ZT_ASSIGN_OR_RETURN(sink, monitor::MetricsSink::Create(options, monitor::StepColumns()));
  }
  return std::unique_ptr<StepMonitor>(new StepMonitor(group, engine, fp16, std::move(sink)));
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
  monitor::StepValues values;
  values.loss = mean.item<double>();
  values.lr = engine_->lr();
  values.loss_scale = engine_->loss_scale();
  values.grad_norm = engine_->last_grad_norm();
  values.seconds = seconds;
  values.train_batch_size = engine_->batch().train_batch_size;
  values.fp16 = fp16_;
  // DeepSpeed counts every boundary as a step, a skipped fp16 one too.
  const int64_t step = engine_->optimizer_steps() + engine_->skipped_steps();
  ZT_RETURN_IF_ERROR(sink_->Write(step, monitor::StepScalars(values)));
  return sink_->WriteTensorBoardOnly(step * values.train_batch_size,
                                     monitor::DeepSpeedScalars(values));
}

}  // namespace zerotrain::python
