// The section validators ValidateConfig (config_validate.h) is assembled from; internal to
// //trainer/config:config_validate. Each reads `config` (its getters give the declared defaults),
// fills its option struct and writes the values it used into the effective proto.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {

// The batch triple's fields that are set must be at least 1: 0 would otherwise read as "derive
// it" (gradient_accumulation_steps: 0 taken as 1), where DeepSpeed refuses it.
absl::Status CheckBatchFields(const TrainerConfigProto& config);
// optimizer {type, params} → EngineOptions::optimizer/adam/sgd.
absl::Status OptimizerToEngine(const TrainerConfigProto& config, engine::EngineOptions* engine,
                               TrainerConfigProto* effective);
// run + steps_per_print + wall_clock_breakdown → RunOptions.
absl::Status RunFromConfig(const TrainerConfigProto& config, RunOptions* run);
// model + activation_checkpointing → ModelOptions (with a checkpoint's config.json when
// model.init_from names one) and ActivationCheckpointOptions.
absl::Status ModelFromConfig(const TrainerConfigProto& config, TrainerConfig* out,
                             std::vector<std::string>* warnings);
absl::Status DataFromConfig(const TrainerConfigProto& config, DataOptions* data,
                            TrainerConfigProto* effective);
// tensorboard, csv_monitor, comms_logger, aio.
absl::Status MonitorsFromConfig(const TrainerConfigProto& config, TrainerConfig* out,
                                std::vector<std::string>* warnings);

}  // namespace zerotrain::trainer
