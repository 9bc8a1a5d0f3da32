// Checks of a validated run against the world outside the config — directories, the resume
// checkpoint, the data — made by the launcher before any rank starts, so that bad input is one
// line and exit code 2 with nothing written, rather than a rank failing after rendezvous.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {

// Everything below for a job of `world_size` ranks. Leaves nothing behind.
absl::Status CheckRunInputs(const TrainerConfig& config, int world_size);

// run.resume_from = "auto", or none set in a group that torchrun restarted (restart_count > 0,
// TORCHELASTIC_RESTART_COUNT): the newest complete checkpoint in <output_dir>/checkpoints (the
// one its `latest` names, written only once the checkpoint is whole), or "" when there is none
// yet. Every rank and the launcher resolve it alike, from the same directory.
void ResolveAutoResume(RunOptions& run, int restart_count);

// Fails, naming `field` and the path, when `dir` cannot be created or written: a probe file is
// written in it, or, where it is missing, in a directory of the check's own made beside the
// missing part; both are removed again. Safe when several nodes check one shared path at once.
absl::Status CheckOutputDirWritable(const std::string& dir, const std::string& field);

// The warning for more local ranks than the cores this process may run on (they then share cores
// and run slower; not an error), naming both counts; "" when they fit.
std::string OversubscribedCoresWarning(int local_ranks);

}  // namespace zerotrain::trainer
