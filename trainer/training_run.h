// TrainGpt: one rank's part of a //trainer:main run — build the GPT and the Engine from a
// validated TrainerConfig, train for run.steps optimizer steps on the configured data, print
// progress (rank 0), evaluate on the held-out split, write the monitors and end with a summary
// and a generated sample. Every rank of the group calls it with the same config.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "comm/comm.h"
#include "trainer/config_validate.h"

namespace zerotrain::trainer {

struct TrainOutputs {
  bool memory_summary = false;  // each rank prints its memory at the end (--memory_summary)
};

absl::Status TrainGpt(const TrainerConfig& config, comm::ProcessGroup* group,
                      const TrainOutputs& outputs);

// Fails, naming the path, when `dir` could not be created and written: checked by the launcher
// before any rank starts, so a bad output_dir leaves nothing behind. Creates nothing.
absl::Status CheckOutputDirWritable(const std::string& dir, const std::string& field);

}  // namespace zerotrain::trainer
