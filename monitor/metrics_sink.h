// MetricsSink: the trainer's per-step metrics (loss, lr, loss_scale, throughput, timings,
// memory) sent to the monitors MetricsOptions turns on — CSV and/or TensorBoard. The caller makes
// one only on rank 0, as DeepSpeed's monitors do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "monitor/csv_writer.h"
#include "monitor/event_file_writer.h"
#include "monitor/metrics_options.h"
#include "monitor/scalar.h"

namespace zerotrain::monitor {

// Conventional names, so the CSV columns and TensorBoard tags agree across runs.
namespace names {
inline constexpr char kLoss[] = "loss";
inline constexpr char kLr[] = "lr";
inline constexpr char kLossScale[] = "loss_scale";
inline constexpr char kGradNorm[] = "grad_norm";  // global L2 norm; inf on a skipped step
inline constexpr char kSamplesPerSec[] = "samples_per_sec";
inline constexpr char kTokensPerSec[] = "tokens_per_sec";
inline constexpr char kMsPerStep[] = "ms_per_step";
inline constexpr char kForwardMs[] = "forward_ms";
inline constexpr char kBackwardMs[] = "backward_ms";
inline constexpr char kCommMs[] = "comm_ms";
inline constexpr char kStepMs[] = "step_ms";
inline constexpr char kRssMb[] = "rss_mb";
inline constexpr char kPeakRssMb[] = "peak_rss_mb";
// CUDA runs only: the caching allocator's peaks since the start, the largest rank's.
inline constexpr char kDevicePeakAllocatedMb[] = "device_peak_allocated_mb";
inline constexpr char kDevicePeakReservedMb[] = "device_peak_reserved_mb";
// DeepSpeed's monitor tags (TensorBoard only, indexed by samples; WriteTensorBoardOnly).
inline constexpr char kDsTrainLoss[] = "Train/Samples/train_loss";
inline constexpr char kDsLr[] = "Train/Samples/lr";
inline constexpr char kDsLossScale[] = "Train/Samples/loss_scale";
}  // namespace names

class MetricsSink {
 public:
  // Creates <csv_output_path>/<job_name>/ and <tensorboard_output_path>/<job_name>/ for the
  // monitors that are on and opens their files, so an unwritable directory fails here, before
  // training starts. With both monitors off the sink accepts and drops everything.
  // `columns`, when given, are every metric name Write will see (the CSV header); otherwise the
  // first Write fixes them. `append` (a resumed run) continues an existing CSV file instead of
  // replacing it.
  static absl::StatusOr<std::unique_ptr<MetricsSink>> Create(
      const MetricsOptions& options, const std::vector<std::string>& columns = {},
      bool append = false);

  // One step's scalars to every open monitor; a row may hold any subset of the CSV columns.
  absl::Status Write(int64_t step, absl::Span<const Scalar> scalars);
  // To TensorBoard only, at `step` (any index): DeepSpeed's own tags, which its monitor writes
  // indexed by samples seen (Train/Samples/train_loss, ...), so dashboards built on DeepSpeed's
  // runs read ours unchanged. The CSV keeps its one row per step.
  absl::Status WriteTensorBoardOnly(int64_t step, absl::Span<const Scalar> scalars);

  // A resumed run's first call: the CSV forgets the rows after `step` (csv_writer.h), so steps
  // the stopped run reached after its checkpoint are not listed twice.
  absl::Status DropRowsAfter(int64_t step);

  // Paths of the files written, "" for a monitor that is off.
  std::string csv_path() const { return csv_ ? csv_->path() : ""; }
  std::string tensorboard_path() const { return tensorboard_ ? tensorboard_->path() : ""; }

 private:
  MetricsSink() = default;
  std::unique_ptr<CsvWriter> csv_;
  std::unique_ptr<EventFileWriter> tensorboard_;
};

// Validates the options without touching the disk: an enabled monitor needs a path, and
// job_name must be a plain directory name.
absl::Status ValidateMetricsOptions(const MetricsOptions& options);

}  // namespace zerotrain::monitor
