// The launcher's checks of a run's directories, checkpoint and data (see run_checks.h).
#include "trainer/run_checks.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/saved_checkpoint.h"
#include "models/model.h"
#include "tools/status_macros.h"
#include "trainer/data/load_dataset.h"
#include "trainer/data/sampler.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;

// Saving into a directory that holds another run's checkpoints would interleave two runs' tags
// under one `latest`: only the run that resumes from them may add to them.
absl::Status CheckCheckpointDir(const RunOptions& run) {
  const std::string mine = run.output_dir + "/checkpoints";
  std::error_code ec;
  if (run.save_interval == 0 || !engine::HasCheckpoint(mine)) {
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

// The checkpoint's parameters against the configured language model's, counted without building
// it (GptParameterCount and LlamaParameterCount are held to the built models by their tests).
absl::Status CheckSameModel(const engine::SavedCheckpoint& saved, const models::ModelOptions& model,
                            const std::string& where) {
  if (model.family == models::ModelFamily::kResNet) return absl::OkStatus();
  int64_t numel = 0;
  for (const engine::SavedParameter& p : saved.params) numel += p.numel;
  const int64_t want = models::ModelParameterCount(model);
  if (numel == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      where, "the checkpoint holds a model of ", numel, " parameters (", saved.params.size(),
      " tensors), and the config's model (model.name \"", models::ModelName(model), "\", n_layer ",
      model.n_layer, ", n_embd ", model.n_embd, ", vocab_size ", model.vocab_size, ") has ", want,
      ": resume with the model section that run trained with"));
}

absl::Status CheckResume(const RunOptions& run, const models::ModelOptions& model) {
  if (run.resume_from.empty()) return absl::OkStatus();
  const std::string where = absl::StrCat("run.resume_from = \"", run.resume_from, "\": ");
  // Opening checks the manifest and that every shard file is there, is the one it lists (run,
  // step, rank: checkpoint/shard_identity.h) and has its recorded size.
  absl::StatusOr<engine::SavedCheckpoint> saved = engine::ReadSavedCheckpoint(run.resume_from);
  if (!saved.ok()) return absl::InvalidArgumentError(where + std::string(saved.status().message()));
  ZT_RETURN_IF_ERROR(CheckSameModel(*saved, model, where));
  const auto& client = saved->client_state;
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

// A template (mkstemp, mkdtemp) for a name no other checker uses: the launchers of every node of
// a job check one shared path, and a probe left by a killed check (same host, pid reused in a
// container) must not stand in the way.
std::string ProbeTemplate(const fs::path& dir) {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  return (dir / absl::StrCat(".zerotrain-write-probe-", host, "-", getpid(), "-XXXXXX")).string();
}

// Writes and removes a file in `dir`; 0 or the errno.
int WriteProbeFile(const fs::path& dir) {
  std::string probe = ProbeTemplate(dir);
  const int fd = mkostemp(probe.data(), O_CLOEXEC);
  const int err = fd < 0 ? errno : (write(fd, "x", 1) == 1 ? 0 : errno);
  if (fd >= 0) {
    close(fd);
    unlink(probe.c_str());
  }
  return err;
}

}  // namespace

void ResolveAutoResume(RunOptions& run, int restart_count) {
  if (run.resume_from != kAutoResume && !(run.resume_from.empty() && restart_count > 0)) return;
  const std::string mine = run.output_dir + "/checkpoints";
  run.resume_from = engine::HasCheckpoint(mine) ? mine : "";
}

absl::Status CheckOutputDirWritable(const std::string& dir, const std::string& field) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", dir, "\": ", why));
  };
  std::error_code ec;
  fs::path target = fs::absolute(dir, ec).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/"
  // Permission bits do not tell (root ignores them, a read-only mount or /proc does not), so a
  // file is written for real and removed again. Where the directory is missing, the run would
  // create it below its nearest existing ancestor: a directory of a name of our own is made there
  // instead, so that no other node's check of the same path sees it come and go.
  fs::path existing = target;
  fs::path first_missing;
  while (!existing.empty() && !fs::exists(existing, ec) && existing != existing.parent_path()) {
    first_missing = existing;
    existing = existing.parent_path();
  }
  if (!fs::is_directory(existing, ec)) return bad(existing.string() + " is not a directory");
  if (first_missing.empty()) {
    const int err = WriteProbeFile(target);
    if (err != 0)
      return bad(absl::StrCat("cannot write in ", target.string(), ": ", std::strerror(err)));
    return absl::OkStatus();
  }
  std::string probe_dir = ProbeTemplate(existing);
  if (mkdtemp(probe_dir.data()) == nullptr) {
    return bad(absl::StrCat("cannot create ", first_missing.string(), ": ", std::strerror(errno)));
  }
  const int err = WriteProbeFile(probe_dir);
  rmdir(probe_dir.c_str());
  if (err != 0)
    return bad(absl::StrCat("cannot write in ", target.string(), ": ", std::strerror(err)));
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
  ZT_RETURN_IF_ERROR(CheckResume(config.run, config.model));
  // Reading the data here costs little (the embedded corpus is ~440 KB) and catches a missing
  // file, ids beyond vocab_size, labels beyond num_classes or a block_size longer than the data
  // before any rank starts.
  ZT_ASSIGN_OR_RETURN(const std::unique_ptr<Dataset> data,
                      LoadDataset(config.data, DataShapeOf(config.model)));
  return DistributedSampler::Create(data->NumTrainWindows(), world_size, 0,
                                    config.batch.micro_batch_size, config.data.seed)
      .status();
}

std::string OversubscribedCoresWarning(int local_ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0
                        ? CPU_COUNT(&set)
                        : static_cast<int>(std::thread::hardware_concurrency());
  if (cores <= 0 || local_ranks <= cores) return "";
  return absl::StrCat(local_ranks, " local ranks (--nproc_per_node) but ", cores,
                      " core(s) available to this job: the ranks will share cores and run slower");
}

}  // namespace zerotrain::trainer
