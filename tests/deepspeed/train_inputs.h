// What DeepSpeed needs to train exactly what //trainer:main trains for a config, written by
// zerotrain's own code so that the two runs start equal: the GPT's initial weights as the trainer
// builds them (its seed, its construction order) and every rank's micro-batches as the trainer's
// DistributedSampler hands them out. ds_train_oracle.py reads these files.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::testing {

// <dir>/model.json (the GPT's sizes) and <dir>/batches.bin: an int64 header [ranks, steps, gas,
// micro_batch, T], then the token ids [rank][step][micro][x|y][micro_batch][T] of `steps`
// optimizer steps on `ranks` ranks (the config validated for that world size).
absl::Status WriteModelAndBatches(const trainer::TrainerConfig& config, int ranks, int64_t steps,
                                  const std::string& dir);

// The weights the trainer starts `config` from, as a torch.save state dict (fp32, the GPT's
// parameter names) at `path`. Stage 3 builds the GPT block by block (partitioned construction),
// which draws its random numbers in another order than stages 0-2 do; this follows the stage.
absl::Status WriteInitialWeights(const trainer::TrainerConfig& config, const std::string& path);

}  // namespace zerotrain::testing
