// Checks of a validated run against the world outside the config — directories, the resume
// checkpoint, the data — made by the launcher before any rank starts, so that bad input is one
// line and exit code 2 with nothing written, rather than a rank failing after rendezvous.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {

// Everything below for a job of `world_size` ranks. Creates nothing.
absl::Status CheckRunInputs(const TrainerConfig& config, int world_size);

// Fails, naming `field` and the path, when `dir` could not be created and written.
absl::Status CheckOutputDirWritable(const std::string& dir, const std::string& field);

}  // namespace zerotrain::trainer
