// The training loop of //trainer:main (see training_run.h); what it prints lives in run_report.cc.
#include "trainer/training_run.h"

#include <torch/nn/module.h>

#include <string.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/saved_checkpoint.h"
#include "engine/tensor_memory.h"
#include "engine/zero_init.h"
#include "hf/hf_weights.h"
#include "models/gpt.h"
#include "models/model.h"
#include "monitor/phase_memory.h"
#include "tools/status_macros.h"
#include "trainer/data/data_position.h"
#include "trainer/data/load_dataset.h"
#include "trainer/data/sampler.h"
#include "trainer/out_of_memory.h"
#include "trainer/run_report.h"
#include "trainer/stop_signal.h"

namespace zerotrain::trainer {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What a rank holds for the run; built once by Setup.
struct Trainer {
  Trainer(const TrainerConfig& config, comm::ProcessGroup* group, monitor::PhaseMemory* phases)
      : config(config), group(group), phases(phases) {}
  const TrainerConfig& config;
  comm::ProcessGroup* group;
  monitor::PhaseMemory* phases;                 // where each phase's peak memory is kept
  std::unique_ptr<engine::ZeroInit> zero_init;  // stage 3; outlives the engine
  std::shared_ptr<models::TrainerModel> model;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<Dataset> data;
  std::optional<DistributedSampler> sampler;
  std::unique_ptr<RunReport> report;
};

// A CUDA out-of-memory error from `phase` becomes the one line out_of_memory.h writes; any other
// status passes through.
absl::Status InPhase(const Trainer& t, RunPhase phase, absl::Status s) {
  if (s.ok()) return s;
  const std::string message(s.message());
  if (!IsCudaOutOfMemory(message)) return s;
  return absl::ResourceExhaustedError(OutOfMemoryLine(t.config, t.group->rank(), phase, message));
}

// The sampler's batches are built on the CPU; the model lives on engine.device.
Batch OnDevice(const Trainer& t, Batch b) {
  const c10::Device device = t.config.engine.device;
  if (b.x.device() != device) {
    b.x = b.x.to(device);
    b.y = b.y.to(device);
  }
  return b;
}

absl::Status Setup(Trainer& t) {
  const TrainerConfig& c = t.config;
  // The same seed everywhere; the engine also starts every rank from rank 0's parameters.
  torch::manual_seed(c.run.seed);
  // The data first: it is cheap, and a bad file or size should not wait for the model.
  ZT_ASSIGN_OR_RETURN(t.data, LoadDataset(c.data, DataShapeOf(c.model)));
  engine::EngineOptions engine_options = c.engine;
  std::unique_ptr<hf::HfWeightsReader> weights;
  if (!c.model.init_from.empty()) {
    ZT_ASSIGN_OR_RETURN(weights, hf::HfWeightsReader::Open(c.model.init_from, c.model));
  }
  absl::Status partitioned;
  models::SubmoduleHook after_submodule;
  t.phases->Enter(monitor::MemoryPhase::kConstruction);
  engine::MemoryRoleScope parameters(engine::MemoryRole::kParameters);
  // Stage 3 partitions the model block by block as it is built: no rank holds all of it. With
  // init_from, rank 0 fills each block from the checkpoint first (the others only check it, so
  // all fail alike), and Partition's broadcast hands every rank its slices of those values.
  if (engine_options.stage == 3) {
    // With the parameter shard on NVMe, its slices go there as they are cut, not to memory.
    ZT_ASSIGN_OR_RETURN(t.zero_init, engine::ZeroInit::Create(t.group, &engine_options));
    after_submodule = [&](const std::string& name, torch::nn::Module& m) {
      if (partitioned.ok() && weights) {
        partitioned = weights->Load(name, m, /*copy=*/t.group->rank() == 0);
      }
      if (partitioned.ok()) partitioned = t.zero_init->Partition(m);
    };
  }
  ZT_ASSIGN_OR_RETURN(t.model, models::MakeModel(c.model, after_submodule));
  ZT_RETURN_IF_ERROR(partitioned);
  if (weights) {
    // Below stage 3 every rank loads the whole model (the engine starts from rank 0's anyway).
    if (!after_submodule) ZT_RETURN_IF_ERROR(weights->Load("", *t.model));
    ZT_RETURN_IF_ERROR(weights->Finish());
    if (t.group->rank() == 0) {
      const hf::HfLoadReport& loaded = weights->report();
      std::printf("zerotrain: loaded %lld tensors (%.1f MiB) from %s in %.2f s\n",
                  static_cast<long long>(loaded.tensors), loaded.bytes / 1048576.0,
                  c.model.init_from.c_str(), loaded.seconds);
    }
  }
  // Create moves the module to engine_options.device (the rank's, from its placement).
  t.phases->Enter(monitor::MemoryPhase::kPartitioning);
  auto engine = engine::Engine::Create(*t.model, engine_options, t.group);
  ZT_RETURN_IF_ERROR(InPhase(t, RunPhase::kSetup, engine.status()));
  t.engine = *std::move(engine);
  ZT_ASSIGN_OR_RETURN(
      auto sampler,
      DistributedSampler::Create(t.data->NumTrainWindows(), t.group->world_size(), t.group->rank(),
                                 t.engine->batch().micro_batch_size, c.data.seed));
  t.sampler.emplace(std::move(sampler));
  ZT_ASSIGN_OR_RETURN(t.report, RunReport::Create(c, t.group, *t.engine, *t.data, *t.phases));
  return absl::OkStatus();
}

// The mean over ranks of each rank's value.
absl::StatusOr<double> GlobalMean(comm::ProcessGroup* group, double value) {
  at::Tensor v = at::full({1}, value, at::kDouble);
  ZT_RETURN_IF_ERROR(group->AllReduce(v, comm::ReduceOp::kAvg));
  return v.item<double>();
}

// The mean loss over ranks, and whether any rank was asked to stop (stop_signal.h): one
// all-reduce, so every rank stops after the same step.
struct StepOutcome {
  double loss = 0;
  bool stop = false;
};
absl::StatusOr<StepOutcome> AgreeOnStep(comm::ProcessGroup* group, double local_loss) {
  at::Tensor v = at::empty({2}, at::kDouble);
  v[0] = local_loss;
  v[1] = StopSignalReceived() != 0 ? 1.0 : 0.0;
  ZT_RETURN_IF_ERROR(group->AllReduce(v, comm::ReduceOp::kAvg));
  return StepOutcome{v[0].item<double>(), v[1].item<double>() > 0};
}

// A clean stop after `step`: Cancelled, which //trainer:main turns into exit code 3.
absl::Status Stopped(const Trainer& t, int64_t step, const std::string& not_saved) {
  const int signo = StopSignalReceived();
  return absl::CancelledError(
      absl::StrCat(kStoppedPrefix, step, " on request (",
                   signo != 0 ? absl::StrCat("signal ", signo, ", ", strsignal(signo))
                              : std::string("another rank's signal"),
                   ")", not_saved.empty() ? "" : absl::StrCat("; ", not_saved),
                   t.report->last_checkpoint().empty()
                       ? std::string("")
                       : absl::StrCat("; the last checkpoint is ", t.report->last_checkpoint())));
}

// Why a stop will not save, "" when it will: a save into a directory that holds an earlier run's
// checkpoints (this run neither resumed from them nor saves there by interval, so nothing checked
// it at start) would interleave two runs' tags under one `latest`.
std::string WhyNoSaveOnStop(const RunOptions& run) {
  if (!run.save_on_stop) return "run.save_on_stop is false: no checkpoint saved";
  const std::string dir = run.output_dir + "/checkpoints";
  if (run.save_interval == 0 && run.resume_from.empty() && engine::HasCheckpoint(dir)) {
    return absl::StrCat("not saved: ", dir, " holds an earlier run's checkpoints");
  }
  return "";
}

// One optimizer step: gradient_accumulation_steps micro-batches. Returns this rank's mean loss.
absl::StatusOr<double> TrainStep(Trainer& t) {
  double loss_sum = 0;
  const int64_t gas = t.engine->batch().gradient_accumulation_steps;
  for (int64_t micro = 0; micro < gas; ++micro) {
    at::Tensor loss;
    engine::MemoryRoleScope activations(engine::MemoryRole::kActivations);
    t.phases->Enter(monitor::MemoryPhase::kForward);
    try {
      const Batch batch = OnDevice(t, t.sampler->NextBatch(*t.data));
      auto forward = t.engine->BeginForward();  // stage 3 gathers parameters inside it
      loss = models::GptLoss(t.model->forward(batch.x), batch.y);
      loss_sum += loss.item<double>();
    } catch (const c10::Error& e) {  // c10::OutOfMemoryError included
      return InPhase(t, RunPhase::kForward,
                     absl::InternalError(absl::StrCat("forward on rank ", t.group->rank(), ": ",
                                                      e.what_without_backtrace())));
    }
    t.phases->Enter(monitor::MemoryPhase::kBackward);
    ZT_RETURN_IF_ERROR(InPhase(t, RunPhase::kBackward, t.engine->Backward(loss)));
    t.phases->Enter(monitor::MemoryPhase::kStep);
    engine::MemoryRoleScope other(engine::MemoryRole::kOther);
    ZT_RETURN_IF_ERROR(InPhase(t, RunPhase::kStep, t.engine->Step()));
  }
  return loss_sum / static_cast<double>(gas);
}

// The held-out loss, averaged over every rank's share of the eval split.
absl::StatusOr<double> EvalLoss(Trainer& t) {
  EvalBatches batches(*t.data, t.group->world_size(), t.group->rank(),
                      t.engine->batch().micro_batch_size, t.config.run.eval_iters);
  double sum = 0;
  int64_t n = 0;
  t.phases->Enter(monitor::MemoryPhase::kEval);
  engine::MemoryRoleScope activations(engine::MemoryRole::kActivations);
  try {
    torch::NoGradGuard no_grad;
    t.model->eval();
    for (Batch b; batches.Next(&b); ++n) {
      b = OnDevice(t, std::move(b));
      auto forward = t.engine->BeginForward();  // one forward each, as in training (stage 3)
      sum += models::GptLoss(t.model->forward(b.x), b.y).item<double>();
    }
    t.model->train();
  } catch (const c10::Error& e) {
    return InPhase(t, RunPhase::kEval,
                   absl::InternalError(absl::StrCat("eval on rank ", t.group->rank(), ": ",
                                                    e.what_without_backtrace())));
  }
  return GlobalMean(t.group, n > 0 ? sum / static_cast<double>(n) : 0.0);
}

// Reports the held-out loss at `step`; nothing when the data has no held-out split (the same on
// every rank, so no rank waits in a collective the others skip).
absl::Status Evaluate(Trainer& t, int64_t step) {
  if (t.data->NumEvalWindows() == 0) return absl::OkStatus();
  ZT_ASSIGN_OR_RETURN(const double loss, EvalLoss(t));
  // Eval's gathers and activations are not the next step's (Step and SaveCheckpoint hand back
  // their own).
  engine::ReturnFreedHostMemory();
  return t.report->Eval(step, loss);
}

std::string CheckpointDir(const RunOptions& run) { return run.output_dir + "/checkpoints"; }

// The trainer's own state rides in the checkpoint's client state: the step the run reached and
// the data position in samples (data_position.h), so a resumed run on any world size sees exactly
// the samples that would have come next.
constexpr char kTrainerStep[] = "trainer_step";

absl::Status Save(Trainer& t, int64_t step) {
  const double start = Now();
  t.phases->Enter(monitor::MemoryPhase::kCheckpointSave);
  // Tagged by the trainer's step, which skipped fp16 steps advance too (as DeepSpeed's
  // global_steps), so two saves never meet on one tag.
  const std::string tag = absl::StrCat("global_step", step);
  std::map<std::string, std::string> client = {{kTrainerStep, std::to_string(step)}};
  PutDataPosition(t.sampler->position(), &client);
  absl::Status saved = t.engine->SaveCheckpoint(CheckpointDir(t.config.run), tag, client);
  if (absl::IsAlreadyExists(saved)) {
    // The trainer names its tags by step: a clash is another run's checkpoints in this directory
    // (under a launcher that ran no start-up check of it). Name the settings that fix it.
    saved = absl::FailedPreconditionError(absl::StrCat(
        "run.output_dir = \"", t.config.run.output_dir, "\" already holds an earlier run's ",
        "checkpoint at step ", step, " (", CheckpointDir(t.config.run),
        "/latest): continue that run with run.resume_from: \"auto\", or choose another "
        "run.output_dir"));
  }
  ZT_RETURN_IF_ERROR(InPhase(t, RunPhase::kCheckpoint, saved));
  return t.report->Saved(step, CheckpointDir(t.config.run) + "/" + tag, Now() - start);
}

// For a checkpoint of an earlier version, whose sampler_position counts micro-steps: the samples
// one micro-step read then, train_batch_size / gradient_accumulation_steps as its manifest
// records them.
absl::StatusOr<LegacyDataLayout> LegacyLayout(const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(const engine::SavedCheckpoint saved, engine::ReadSavedCheckpoint(dir));
  const int64_t batch = saved.train_batch_size, accumulation = saved.gradient_accumulation_steps;
  if (batch <= 0 || accumulation <= 0 || batch % accumulation != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(saved.tag_dir, ": no train_batch_size / gradient_accumulation_steps to ",
                     "convert its ", kLegacySamplerPositionKey, " with"));
  }
  return LegacyDataLayout{batch / accumulation};
}

// Loads run.resume_from when set; returns the number of steps already done.
absl::StatusOr<int64_t> Resume(Trainer& t) {
  const std::string& dir = t.config.run.resume_from;
  if (dir.empty()) return 0;
  t.phases->Enter(monitor::MemoryPhase::kCheckpointLoad);
  auto loaded = t.engine->LoadCheckpoint(dir);
  ZT_RETURN_IF_ERROR(InPhase(t, RunPhase::kCheckpoint, loaded.status()));
  const std::map<std::string, std::string> client = *std::move(loaded);
  const auto not_ours = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("run.resume_from = \"", dir, "\": ", why,
                                                   " (was it written by //trainer:main?)"));
  };
  int64_t step = 0;
  auto it = client.find(kTrainerStep);
  if (it == client.end() || !absl::SimpleAtoi(it->second, &step) || step < 0) {
    return not_ours(absl::StrCat("the checkpoint's ", kTrainerStep, " is missing or malformed"));
  }
  const absl::StatusOr<LegacyDataLayout> legacy =
      HasOnlyLegacyDataPosition(client) ? LegacyLayout(dir)
                                        : absl::StatusOr<LegacyDataLayout>(LegacyDataLayout{});
  auto position = DataPositionFromClientState(client, t.data->NumTrainWindows(), legacy);
  if (!position.ok()) return not_ours(position.status().message());
  ZT_RETURN_IF_ERROR(t.sampler->Seek(*position));
  ZT_RETURN_IF_ERROR(t.report->Resumed(dir, step, *position));
  return step;
}

}  // namespace

absl::Status TrainModel(const TrainerConfig& config, comm::ProcessGroup* group,
                        const TrainOutputs& outputs) {
  // Every CPU tensor from here on is counted, by role, for the peaks of each phase.
  engine::InstallCpuTensorCounter();
  monitor::PhaseMemory phases(config.engine.device.is_cuda() ? config.engine.device.index() : -1);
  Trainer t(config, group, &phases);
  ZT_RETURN_IF_ERROR(Setup(t));
  const RunOptions& run = config.run;
  ZT_ASSIGN_OR_RETURN(const int64_t done, Resume(t));
  if (done >= run.steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run.resume_from = \"", run.resume_from, "\": the checkpoint is at step ", done,
        ", and run.steps = ", run.steps, ": nothing left to train (raise run.steps)"));
  }
  ZT_RETURN_IF_ERROR(Evaluate(t, done));
  const std::string no_save_on_stop = WhyNoSaveOnStop(run);
  t.report->Start();
  for (int64_t step = done + 1; step <= run.steps; ++step) {
    const double start = Now();
    ZT_ASSIGN_OR_RETURN(const double local_loss, TrainStep(t));
    ZT_ASSIGN_OR_RETURN(const StepOutcome outcome, AgreeOnStep(group, local_loss));
    ZT_RETURN_IF_ERROR(t.report->Step(step, outcome.loss, Now() - start));
    const bool due = run.save_interval > 0 && (step % run.save_interval == 0 || step == run.steps);
    if (due || (outcome.stop && no_save_on_stop.empty())) ZT_RETURN_IF_ERROR(Save(t, step));
    if (outcome.stop) return Stopped(t, step, no_save_on_stop);
    if (run.eval_interval > 0 && step % run.eval_interval == 0 && step < run.steps) {
      ZT_RETURN_IF_ERROR(Evaluate(t, step));
    }
  }
  ZT_RETURN_IF_ERROR(Evaluate(t, run.steps));
  // The sample: every rank generates it, each forward in the engine's forward scope, so stage 3
  // gathers one submodule at a time as in training, never the whole model.
  phases.Enter(monitor::MemoryPhase::kEnd);
  engine::Engine* engine = t.engine.get();
  ZT_RETURN_IF_ERROR(
      InPhase(t, RunPhase::kSample, t.report->Sample(*t.model, [engine]() -> std::shared_ptr<void> {
        return std::make_shared<engine::Engine::ForwardScope>(engine->BeginForward());
      })));
  return t.report->Finish(outputs.memory_summary);
}

}  // namespace zerotrain::trainer
