// MetricsSink: opening the monitors and fanning each step out to them.
#include "monitor/metrics_sink.h"

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

namespace zerotrain::monitor {

absl::Status ValidateMetricsOptions(const MetricsOptions& options) {
  if (options.csv && options.csv_output_path.empty()) {
    return absl::InvalidArgumentError(
        "csv_monitor.output_path: empty while csv_monitor is enabled");
  }
  if (options.tensorboard && options.tensorboard_output_path.empty()) {
    return absl::InvalidArgumentError(
        "tensorboard.output_path: empty while tensorboard is enabled");
  }
  const std::string& job = options.job_name;
  if (job.empty() || job == "." || job == ".." || job.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_name: '", job, "' is not a plain directory name"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MetricsSink>> MetricsSink::Create(
    const MetricsOptions& options, const std::vector<std::string>& columns, bool append) {
  ZT_RETURN_IF_ERROR(ValidateMetricsOptions(options));
  std::unique_ptr<MetricsSink> sink(new MetricsSink());
  if (options.csv) {
    ZT_ASSIGN_OR_RETURN(
        sink->csv_, CsvWriter::Open(absl::StrCat(options.csv_output_path, "/", options.job_name),
                                    "metrics.csv", append));
    if (!columns.empty()) ZT_RETURN_IF_ERROR(sink->csv_->DeclareColumns(columns));
  }
  if (options.tensorboard) {
    ZT_ASSIGN_OR_RETURN(sink->tensorboard_,
                        EventFileWriter::Open(
                            absl::StrCat(options.tensorboard_output_path, "/", options.job_name)));
  }
  return sink;
}

absl::Status MetricsSink::Write(int64_t step, absl::Span<const Scalar> scalars) {
  const double now = WallTimeNow();
  if (csv_) ZT_RETURN_IF_ERROR(csv_->Write(step, scalars, now));
  if (tensorboard_) ZT_RETURN_IF_ERROR(tensorboard_->WriteScalars(step, scalars, now));
  return absl::OkStatus();
}

absl::Status MetricsSink::DropRowsAfter(int64_t step) {
  return csv_ ? csv_->DropRowsAfter(step) : absl::OkStatus();
}

absl::Status MetricsSink::WriteTensorBoardOnly(int64_t step, absl::Span<const Scalar> scalars) {
  if (!tensorboard_) return absl::OkStatus();
  return tensorboard_->WriteScalars(step, scalars, WallTimeNow());
}

}  // namespace zerotrain::monitor
