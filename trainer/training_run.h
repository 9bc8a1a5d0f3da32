// TrainModel: one rank's part of a //trainer:main run — build the model (model.h's family, with
// Hugging Face weights when model.init_from names them) and the Engine from a
// validated TrainerConfig, train for run.steps optimizer steps on the configured data, print
// progress (rank 0), evaluate on the held-out split, write the monitors and end with a summary
// and a generated sample. Every rank of the group calls it with the same config.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "comm/comm.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {

struct TrainOutputs {
  bool memory_summary = false;  // each rank prints its memory at the end (--memory_summary)
};

absl::Status TrainModel(const TrainerConfig& config, comm::ProcessGroup* group,
                        const TrainOutputs& outputs);

}  // namespace zerotrain::trainer
