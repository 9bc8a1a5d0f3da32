// ValidateConfig: the one place a TrainerConfigProto is checked, turning it into the option
// structs each module takes. Errors name the field (dotted path) and the value; DeepSpeed keys
// zerotrain does not implement are an error when set to something that needs the feature, and
// keys that are meaningless here (model parallelism) are warnings. docs/CONFIG.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/backend_kind.h"
#include "comm/comm_log.h"
#include "engine/engine_options.h"
#include "models/model.h"
#include "monitor/metrics_options.h"
#include "recompute/activation_checkpoint.h"
#include "trainer/config/config.pb.h"
#include "trainer/config/config_schedule.h"
#include "trainer/data/data_options.h"
#include "trainer/data/load_dataset.h"

namespace zerotrain::trainer {

// run.device. device_placement.h resolves it on each rank: "auto" and "cuda" mean
// cuda:LOCAL_RANK there.
enum class DeviceRequest { kAuto, kCuda, kCpu };

// run.dist_backend: a backend, or none for "auto" (NCCL on CUDA and Gloo on the CPU, resolved
// with the device).
using DistBackend = std::optional<comm::BackendKind>;
const char* DistBackendName(const DistBackend& backend);  // "auto", or comm::BackendName

inline constexpr char kAutoResume[] = "auto";

// The trainer loop's own settings (run section plus DeepSpeed's logging keys).
struct RunOptions {
  int64_t steps = 0;  // optimizer steps
  uint64_t seed = 0;
  std::string output_dir;
  int64_t eval_interval = 0;  // optimizer steps between eval losses; 0 = only at the end
  int64_t eval_iters = 0;     // micro-batches per eval loss
  int64_t steps_per_print = 0;
  bool wall_clock_breakdown = false;
  int64_t sample_tokens = 0;  // generated after training; 0 = none
  int64_t save_interval = 0;  // checkpoints into <output_dir>/checkpoints; 0 = none
  // A checkpoint directory to continue from; "" = fresh start; kAutoResume = this run's own
  // newest checkpoint if it has one (ResolveAutoResume, run_checks.h).
  std::string resume_from;
  bool check_calls = true;       // comm::GroupOptions::check_calls
  int64_t comm_timeout_s = 300;  // comm::GroupOptions::timeout
  bool save_on_stop = true;      // a checkpoint at the step a stop signal ends
  int64_t stop_timeout_s = 120;  // from the signal to the rank's forced exit
  DeviceRequest device = DeviceRequest::kAuto;
  // As configured; a rank's copy holds the resolved backend (never "auto") once placed.
  DistBackend dist_backend;
};

// DeepSpeed's comms_logger. The comm layer records every op when GroupOptions::log_ops is set
// (map `enabled` to it); what is reported of it (verbose, prof_all, prof_ops) is comm's
// CommReportOptions, which the trainer and the Python front end pass to comm::PrintEachOp and
// comm::Report. debug adds the caller's Python function name in DeepSpeed; there is no caller
// name to add in C++, so it is accepted with no effect.
struct CommsLoggerOptions : comm::CommReportOptions {
  bool enabled = false;
  bool debug = false;
};

struct TrainerConfig {
  engine::EngineOptions engine;  // batch triple as configured (ResolveBatchSizes has checked it)
  engine::BatchSizes batch;      // the resolved triple for the validated world size
  models::ModelOptions model;
  DataOptions data;
  monitor::MetricsOptions metrics;
  recompute::ActivationCheckpointOptions activation_checkpointing;
  LrScheduleOptions scheduler;  // its type and options; the options are also engine.lr_schedule
  CommsLoggerOptions comms_logger;
  RunOptions run;
  // The input with every default and derived value written in: PrintConfig(effective).
  TrainerConfigProto effective;
};

// What the run's data must fit: ids and windows of the language model, or the classifier's labels.
inline DatasetShape DataShapeOf(const models::ModelOptions& m) {
  return {m.vocab_size, m.block_size, m.num_classes};
}

absl::StatusOr<TrainerConfig> ValidateConfig(const TrainerConfigProto& config, int world_size,
                                             std::vector<std::string>* warnings);

}  // namespace zerotrain::trainer
