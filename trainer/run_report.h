// RunReport: what a //trainer:main run tells its user — a header naming the run, its device and
// offload tiers, the effective configuration (config_table.h), a progress line every
// steps_per_print steps (loss, lr, loss scale, throughput, step time, host memory, on CUDA the
// caching allocator's peaks, and with wall_clock_breakdown the engine's time split), eval losses,
// the monitors (CSV/TensorBoard) and the final summary with a generated sample. Every rank calls
// every method at the same steps (some take collectives); only rank 0 prints and writes files.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "models/causal_lm.h"
#include "monitor/metrics_sink.h"
#include "monitor/phase_memory.h"
#include "trainer/config/config_validate.h"
#include "trainer/data/data_position.h"
#include "trainer/data/dataset.h"

namespace zerotrain::trainer {

// "optimizer states -> nvme (/mnt/nvme), params -> none": where the offload sections put the
// optimizer states and (stage 3) the parameters.
std::string OffloadSummary(const engine::EngineOptions& options);

class RunReport {
 public:
  // On rank 0, opens the monitors (creating their directories) and prints the run's header and
  // the configuration table. `phases` holds this rank's peaks by phase; it outlives the report.
  static absl::StatusOr<std::unique_ptr<RunReport>> Create(const TrainerConfig& config,
                                                           comm::ProcessGroup* group,
                                                           const engine::Engine& engine,
                                                           const Dataset& data,
                                                           const monitor::PhaseMemory& phases);
  void Start();
  // After optimizer step `step` (1-based): `loss` is the mean over ranks, `seconds` its wall time.
  absl::Status Step(int64_t step, double loss, double seconds);
  absl::Status Eval(int64_t step, double eval_loss);
  // `tag_dir` is <checkpoint directory>/<tag>.
  absl::Status Saved(int64_t step, const std::string& tag_dir, double seconds);
  // After a resume from `step`: prints where the run and its data stand, and drops the CSV rows
  // after `step`. The opening eval at `step` then goes to stdout only: the CSV rows up to `step`
  // are the saving run's, as a straight run's would be.
  absl::Status Resumed(const std::string& dir, int64_t step, const DataPosition& data);
  // The summary, and each rank's memory when asked.
  absl::Status Finish(bool memory_summary);
  // A sample of generated text (run.sample_tokens), printed by rank 0. Every rank generates the
  // same tokens, each forward inside `forward_scope` (GenerateOptions::forward_scope).
  absl::Status Sample(models::TrainerModel& model,
                      std::function<std::shared_ptr<void>()> forward_scope);
  const std::string& last_checkpoint() const { return last_checkpoint_; }  // "" = none saved

 private:
  RunReport(const TrainerConfig& config, comm::ProcessGroup* group, const engine::Engine& engine,
            const monitor::PhaseMemory& phases)
      : config_(config), group_(group), engine_(engine), phases_(phases) {}
  // Bytes, each the largest over ranks.
  struct Memory {
    double rss = 0, peak_rss = 0;
    // On CUDA: the caching allocator's peaks since the run began; 0 on the CPU.
    double device_peak_allocated = 0, device_peak_reserved = 0;
    monitor::PhasePeaks phases{};  // each phase's, since the run began
  };
  bool on_cuda() const { return config_.engine.device.is_cuda(); }
  // This rank's reading, then the largest over ranks (a collective).
  absl::StatusOr<Memory> MaxMemory();
  // Each rank's device peaks (allocated, reserved) in bytes, in rank order (a collective; CUDA).
  absl::StatusOr<std::vector<std::pair<double, double>>> DevicePeaksByRank();
  void PrintProgress(int64_t step, double loss, double seconds, const Memory& memory) const;
  // The overflow line, when `step` was skipped.
  void PrintSkipped(int64_t step);

  const TrainerConfig& config_;
  comm::ProcessGroup* group_;
  const engine::Engine& engine_;
  const monitor::PhaseMemory& phases_;
  std::unique_ptr<monitor::MetricsSink> sink_;  // rank 0 only
  double start_ = 0;
  double window_seconds_ = 0;  // since the last progress line
  int64_t window_steps_ = 0;
  int64_t steps_run_ = 0;     // by this process (a resumed run counts from its resume point)
  double train_seconds_ = 0;  // all steps but the first (warm-up)
  double first_loss_ = 0, last_loss_ = 0, last_eval_loss_ = 0, first_eval_loss_ = -1;
  std::string last_checkpoint_;  // "" = none saved
  int64_t resumed_step_ = -1;    // the step a resumed run's opening eval is at; -1 once written
  Memory peak_;                  // the latest reading: its peaks are the run's so far
  int64_t skipped_seen_ = 0;     // the engine's skipped steps and loss scale after the last step
  double scale_seen_ = 1;
};

}  // namespace zerotrain::trainer
