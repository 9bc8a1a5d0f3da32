// The scheduler section → one of optim/lr_schedules.h's schedules. Parameters follow DeepSpeed's
// constructors: a parameter the chosen type does not take is an error (Python would raise a
// TypeError for the unexpected keyword), a missing one takes that schedule's default.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "engine/engine_options.h"
#include "trainer/config/config.pb.h"

namespace zerotrain::trainer {

struct LrScheduleOptions {
  std::string type;                   // DeepSpeed's spelling ("WarmupDecayLR"); empty = constant lr
  engine::LrScheduleOptions options;  // the Engine's EngineOptions::lr_schedule
};

// `optimizer_lr` is WarmupCosineLR's base lr and WarmupLR's default warmup_max_lr; `run_steps` is
// total_num_steps when the section leaves it out. The resolved parameters are written back into
// `effective` (for --print_config).
absl::StatusOr<LrScheduleOptions> ScheduleFromConfig(const SchedulerConfig& config,
                                                     double optimizer_lr, int64_t run_steps,
                                                     SchedulerConfig* effective);

}  // namespace zerotrain::trainer
