// //trainer:main — what a user runs. Without job variables in its environment it is the launcher:
// it loads and validates the config (bad input: one line, exit 2, nothing written) and starts
// --nproc_per_node ranks of itself (default 2). As a rank (started by the launcher, torchrun,
// mpirun or srun) it takes the device run.device resolves to for its LOCAL_RANK
// (device_placement.h), joins the group and trains (training_run.h). Exit codes: 0 done, 1 a rank
// failed (its error is printed), 2 bad input (a placement that cannot work included), 3 stopped by
// SIGINT/SIGTERM.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/comm.h"
#include "comm/comm_log.h"
#include "comm/launcher.h"
#include "tools/status_macros.h"
#include "trainer/advisor/advisor.h"
#include "trainer/advisor/parse_count.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_validate.h"
#include "trainer/device_placement.h"
#include "trainer/main_flags.h"
#include "trainer/model_tool.h"
#include "trainer/output_dir_lock.h"
#include "trainer/run_checks.h"
#include "trainer/stop_signal.h"
#include "trainer/training_run.h"

namespace zerotrain::trainer {
namespace {

constexpr int kBadInput = 2;
constexpr int kDefaultRanks = 2;

// Where a stopped run can be continued from: the tag `latest` names, if any.
std::string NewestCheckpointLine(const RunOptions& run) {
  const std::string dir = run.output_dir + "/checkpoints";
  std::ifstream latest(dir + "/latest");
  std::string tag;
  if (!(latest >> tag)) return "no checkpoint was saved";
  return absl::StrCat("the newest checkpoint is ", dir, "/", tag,
                      ": continue with run.resume_from: \"auto\" (or \"", dir, "\")");
}

// Also where a rank's launcher looks for its error (torchrun's "Root Cause" included).
int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "zerotrain: error: %s\n", message.c_str());
  comm::ReportRankError(message);
  return code;
}

// Set by torchrun and our launcher, mpirun (Open MPI) or srun (Slurm): this process is a rank.
// An explicit --nproc_per_node makes it a launcher even there (e.g. inside `srun --pty bash`).
bool InJob(const MainFlags& flags) {
  if (flags.nproc_per_node > 0 && !comm::LaunchedByLauncher()) return false;
  return std::getenv("RANK") != nullptr || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr ||
         std::getenv("SLURM_PROCID") != nullptr;
}

// Where this process sits: a rank's variables as its launcher set them (read once here), or for
// our own launcher only the world it will start.
absl::StatusOr<comm::RendezvousInfo> JobInfo(const MainFlags& flags) {
  if (InJob(flags)) return comm::RendezvousFromEnv();
  comm::RendezvousInfo info;
  info.world_size =
      flags.nnodes * (flags.nproc_per_node > 0 ? flags.nproc_per_node : kDefaultRanks);
  return info;
}

// --estimate_memory: the model from the flags, else from the config's GPT.
absl::StatusOr<std::string> EstimateMemory(const MainFlags& flags, const TrainerConfig& config) {
  advisor::AdvisorInput in;
  in.total_params = models::ModelParameterCount(config.model);
  in.largest_layer_params = models::LargestLayerParameterCount(config.model);
  if (!flags.params.empty()) {  // with --largest_layer_params (ParseMainFlags checks)
    ZT_ASSIGN_OR_RETURN(in.total_params, advisor::ParseCount("params", flags.params));
    ZT_ASSIGN_OR_RETURN(in.largest_layer_params,
                        advisor::ParseCount("largest_layer_params", flags.largest_layer_params));
  }
  in.gpus_per_node = flags.gpus_per_node > 0    ? flags.gpus_per_node
                     : flags.nproc_per_node > 0 ? flags.nproc_per_node
                                                : kDefaultRanks;
  in.nodes = flags.nnodes;
  in.device_memory_gib = flags.device_memory_gib;
  in.host_memory_gib = flags.host_memory_gib;
  // The config's bf16 master weights / optimizer states shrink the sharded state's bytes.
  in.bf16_master_weights = config.engine.bf16_master_weights;
  in.bf16_optimizer_states = config.engine.bf16_optimizer_states;
  if (config.engine.stage == 3)
    in.zero_hpz_partition_size = config.engine.stage3.hpz_partition_size;
  return advisor::EstimateMemoryReport(in);
}

// The launcher's check of its whole node, before it starts any rank: one line and exit 2 instead
// of every rank failing alike.
absl::Status CheckNodePlacement(const TrainerConfig& config, int local_ranks) {
  const CudaDevices cuda = VisibleCudaDevices();
  for (int local_rank = 0; local_rank < local_ranks; ++local_rank) {
    ZT_RETURN_IF_ERROR(ResolvePlacement(config.run, local_rank, local_ranks, cuda).status());
  }
  return absl::OkStatus();
}

// This rank's device and backend, from the variables its launcher set; no rendezvous yet, so a
// bad placement ends this rank at once (exit 2) rather than leaving the others waiting.
absl::StatusOr<TrainerConfig> PlaceRank(const TrainerConfig& config,
                                        const comm::RendezvousInfo& info) {
  ZT_ASSIGN_OR_RETURN(const int local_world_size, LocalWorldSizeFromEnv());
  ZT_ASSIGN_OR_RETURN(
      const Placement placement,
      ResolvePlacement(config.run, info.local_rank, local_world_size, VisibleCudaDevices()));
  TrainerConfig placed = config;
  placed.engine.device = placement.device;
  placed.run.dist_backend = placement.backend;
  return placed;
}

// `info` is the job's variables as Main read them; the rendezvous is ProcessGroup::Create's.
int RunRank(const MainFlags& flags, const comm::RendezvousInfo& info,
            const TrainerConfig& unplaced) {
  InstallStopSignalHandlers(std::chrono::seconds(unplaced.run.stop_timeout_s));
  comm::DieWithLauncher();
  if (flags.local_rank >= 0 && flags.local_rank != info.local_rank) {
    return Fail(kBadInput, absl::StrCat("--local_rank=", flags.local_rank,
                                        " disagrees with the job's local rank ", info.local_rank,
                                        " (", info.source, ")"));
  }
  auto placed = PlaceRank(unplaced, info);
  if (!placed.ok()) return Fail(kBadInput, std::string(placed.status().message()));
  const TrainerConfig& config = *placed;
  const int rank = info.rank;
  // Under another launcher rank 0 makes our launcher's checks of the run's inputs and holds its
  // output directory (ours does both for its ranks).
  std::optional<OutputDirLock> lock;
  if (rank == 0 && !comm::LaunchedByLauncher()) {
    if (absl::Status s = CheckRunInputs(config, info.world_size); !s.ok()) {
      return Fail(kBadInput, std::string(s.message()));
    }
    auto acquired = OutputDirLock::Acquire(config.run.output_dir, "run.output_dir");
    if (!acquired.ok()) return Fail(kBadInput, std::string(acquired.status().message()));
    lock = *std::move(acquired);
  }
  absl::Status s = [&]() -> absl::Status {
    // NCCL binds its communicator to the current device when the group is made.
    ZT_RETURN_IF_ERROR(UseDevice(config.engine.device));
    comm::GroupOptions options;
    options.log_ops = config.comms_logger.enabled;
    options.check_calls = config.run.check_calls;
    options.timeout = std::chrono::seconds(config.run.comm_timeout_s);
    // ResolvePlacement leaves no "auto".
    options.backend = config.run.dist_backend.value_or(comm::BackendKind::kGloo);
    ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(info, options));
    const bool report = config.comms_logger.enabled && rank == 0;
    if (report) comm::PrintEachOp(config.comms_logger, group->log());
    ZT_RETURN_IF_ERROR(TrainModel(config, group.get(), {.memory_summary = flags.memory_summary}));
    if (report) std::printf("\n%s", comm::Report(config.comms_logger, group->log()).c_str());
    return absl::OkStatus();
  }();
  if (s.ok()) return 0;
  const std::string message = std::string(s.message());
  const bool clean_stop = absl::IsCancelled(s) && absl::StartsWith(message, kStoppedPrefix);
  if (clean_stop || StopSignalReceived() != 0) {
    // Asked to stop: not a failure to report (an error here is a peer that stopped first).
    if (rank == 0 || !clean_stop) {
      std::fprintf(stderr, "zerotrain: rank %d: %s\n", rank, message.c_str());
    }
    return kStoppedExitCode;
  }
  std::fprintf(stderr, "zerotrain: rank %d: %s\n", rank, message.c_str());
  comm::ReportRankError(message);
  return 1;
}

int Main(int argc, char** argv) {
  // `bazel run` starts binaries in their runfiles tree; relative paths in flags and configs
  // mean the user's directory, as they would for the binary run directly.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr) {
    if (chdir(dir) != 0) return Fail(kBadInput, absl::StrCat("cannot enter ", dir));
  }
  auto flags = ParseMainFlags(argc, argv);
  if (!flags.ok()) return Fail(kBadInput, std::string(flags.status().message()));
  if (flags->help) {
    std::printf("%s", MainUsage().c_str());
    return 0;
  }
  std::vector<std::string> warnings;
  auto proto = LoadConfigProto({flags->config, flags->ds_config}, &warnings);
  if (!proto.ok()) return Fail(kBadInput, std::string(proto.status().message()));
  // Ranks inherit the launcher's environment, so each resolves the same timeout.
  if (absl::Status s = ApplyDeepSpeedTimeout(std::getenv("DEEPSPEED_TIMEOUT"), &*proto); !s.ok()) {
    return Fail(kBadInput, std::string(s.message()));
  }
  // --generate and --export_hf train nothing: a config without batch sizes is theirs to take.
  if ((flags->generate || !flags->export_hf.empty()) && !proto->has_train_batch_size() &&
      !proto->has_train_micro_batch_size_per_gpu() && !proto->has_gradient_accumulation_steps()) {
    proto->set_train_micro_batch_size_per_gpu(1);
  }
  auto job = JobInfo(*flags);
  if (!job.ok()) return Fail(kBadInput, std::string(job.status().message()));
  auto config = ValidateConfig(*proto, job->world_size, &warnings);
  if (!config.ok()) return Fail(kBadInput, std::string(config.status().message()));
  // A group torchrun restarted continues from its own newest checkpoint.
  ResolveAutoResume(config->run, job->restart_count);
  // Once per job: by the launcher, or by rank 0 under another launcher.
  const char* rank = std::getenv("RANK");
  if (!comm::LaunchedByLauncher() && (rank == nullptr || std::string(rank) == "0")) {
    for (const std::string& w : warnings)
      std::fprintf(stderr, "zerotrain: warning: %s\n", w.c_str());
  }
  if (flags->print_config) {
    std::printf("%s", PrintConfig(config->effective).c_str());
    return 0;
  }
  if (flags->estimate_memory) {
    auto report = EstimateMemory(*flags, *config);
    if (!report.ok()) return Fail(kBadInput, std::string(report.status().message()));
    std::printf("%s%s", report->c_str(), !report->empty() && report->back() == '\n' ? "" : "\n");
    return 0;
  }
  if (flags->generate || !flags->export_hf.empty()) {
    ModelToolOptions tool;
    tool.export_hf = flags->export_hf;
    tool.generate = flags->generate;
    tool.prompt = flags->prompt;
    tool.prompt_tokens = flags->prompt_tokens;
    tool.max_new_tokens = flags->max_new_tokens;
    tool.temperature = flags->temperature;
    tool.top_k = flags->top_k;
    tool.seed = static_cast<uint64_t>(flags->seed);
    const absl::Status s = RunModelTool(*config, tool);
    if (s.ok()) return 0;
    return Fail(absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? kBadInput : 1,
                std::string(s.message()));
  }
  if (InJob(*flags)) return RunRank(*flags, *job, *config);
  const int local_ranks = flags->nproc_per_node > 0 ? flags->nproc_per_node : kDefaultRanks;
  if (absl::Status s = CheckNodePlacement(*config, local_ranks); !s.ok()) {
    return Fail(kBadInput, std::string(s.message()));
  }
  if (absl::Status s = CheckRunInputs(*config, job->world_size); !s.ok()) {
    return Fail(kBadInput, std::string(s.message()));
  }
  // Held until the ranks are gone; only the node that runs rank 0 writes files.
  std::optional<OutputDirLock> lock;
  if (flags->node_rank == 0) {
    auto acquired = OutputDirLock::Acquire(config->run.output_dir, "run.output_dir");
    if (!acquired.ok()) return Fail(kBadInput, std::string(acquired.status().message()));
    lock = *std::move(acquired);
  }
  if (const std::string w = OversubscribedCoresWarning(local_ranks); !w.empty()) {
    std::fprintf(stderr, "zerotrain: warning: %s\n", w.c_str());
  }
  comm::LaunchOptions launch;
  launch.nproc_per_node = local_ranks;
  launch.nnodes = flags->nnodes;
  launch.node_rank = flags->node_rank;
  launch.master_addr = flags->master_addr;
  launch.master_port = flags->master_port;
  launch.args = flags->rank_args;
  launch.stopped_exit_code = kStoppedExitCode;
  // A rank's own watchdog ends it stop_timeout_s after the signal; the kill is the backstop.
  launch.stop_grace = std::chrono::seconds(config->run.stop_timeout_s + 5);
  const absl::Status s = comm::LaunchRanks(launch);
  if (s.ok()) return 0;
  if (absl::IsInvalidArgument(s)) {  // refused before any rank started: leave nothing behind
    if (lock) lock->Abandon();
    return Fail(kBadInput, std::string(s.message()));
  }
  if (!absl::IsCancelled(s)) return Fail(1, std::string(s.message()));
  // Asked to stop: not an error. The last line says where to continue from.
  std::fprintf(stderr, "zerotrain: stopped on request (%s); %s\n", std::string(s.message()).c_str(),
               NewestCheckpointLine(config->run).c_str());
  return kStoppedExitCode;
}

}  // namespace
}  // namespace zerotrain::trainer

int main(int argc, char** argv) { return zerotrain::trainer::Main(argc, argv); }
