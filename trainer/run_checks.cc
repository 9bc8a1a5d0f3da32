// The launcher's checks of a run's directories, checkpoint and data (see run_checks.h).
#include "trainer/run_checks.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "tools/status_macros.h"
#include "trainer/data/sampler.h"
#include "trainer/data/token_dataset.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;

// Saving into a directory that holds another run's checkpoints would interleave two runs' tags
// under one `latest`: only the run that resumes from them may add to them.
absl::Status CheckCheckpointDir(const RunOptions& run) {
  const std::string mine = run.output_dir + "/checkpoints";
  std::error_code ec;
  if (run.save_interval == 0 || !fs::exists(mine + "/" + checkpoint::kLatestFileName, ec)) {
    return absl::OkStatus();
  }
  if (!run.resume_from.empty() && fs::equivalent(run.resume_from, mine, ec)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "run.output_dir = \"", run.output_dir, "\" already holds an earlier run's checkpoints (",
      mine, "/latest): continue it with run.resume_from = \"", mine,
      "\", or choose another run.output_dir"));
}

absl::Status CheckResume(const RunOptions& run) {
  if (run.resume_from.empty()) return absl::OkStatus();
  const std::string where = absl::StrCat("run.resume_from = \"", run.resume_from, "\": ");
  // Opening checks the manifest and that every shard file is there, is the one it lists (run,
  // step, rank: checkpoint/shard_identity.h) and has its recorded size.
  auto reader = checkpoint::CheckpointReader::Open(run.resume_from);
  if (!reader.ok())
    return absl::InvalidArgumentError(where + std::string(reader.status().message()));
  const auto& client = (*reader)->manifest().client_state();
  int64_t step = 0;
  const auto it = client.find("trainer_step");
  if (it == client.end() || !absl::SimpleAtoi(it->second, &step)) {
    return absl::InvalidArgumentError(where + "the checkpoint was not written by //trainer:main");
  }
  if (step >= run.steps) {
    return absl::InvalidArgumentError(absl::StrCat(where, "the checkpoint is at step ", step,
                                                   " and run.steps = ", run.steps,
                                                   ": nothing left to train (raise run.steps)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckOutputDirWritable(const std::string& dir, const std::string& field) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  // The nearest existing ancestor decides: the run would create everything below it.
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", dir, "\": ", p.string(), " is not a directory"));
  }
  if (access(p.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", dir, "\": ", p.string(), " is not writable"));
  }
  return absl::OkStatus();
}

absl::Status CheckRunInputs(const TrainerConfig& config, int world_size) {
  ZT_RETURN_IF_ERROR(CheckOutputDirWritable(config.run.output_dir, "run.output_dir"));
  if (config.metrics.csv) {
    ZT_RETURN_IF_ERROR(
        CheckOutputDirWritable(config.metrics.csv_output_path, "csv_monitor.output_path"));
  }
  if (config.metrics.tensorboard) {
    ZT_RETURN_IF_ERROR(
        CheckOutputDirWritable(config.metrics.tensorboard_output_path, "tensorboard.output_path"));
  }
  ZT_RETURN_IF_ERROR(CheckCheckpointDir(config.run));
  ZT_RETURN_IF_ERROR(CheckResume(config.run));
  // Reading the tokens here costs little (the embedded corpus is ~440 KB) and catches a missing
  // file, ids beyond vocab_size or a block_size longer than the data before any rank starts.
  ZT_ASSIGN_OR_RETURN(TokenDataset data,
                      LoadTokens(config.data, config.model.vocab_size, config.model.block_size));
  return DistributedSampler::Create(data.NumTrainWindows(), world_size, 0,
                                    config.batch.micro_batch_size, config.data.seed)
      .status();
}

}  // namespace zerotrain::trainer
