// The trainer's progress lines, monitors and summary (see run_report.h).
#include "trainer/run_report.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "models/generate.h"
#include "models/tokenizer.h"
#include "monitor/device_memory_stats.h"
#include "monitor/memory_stats.h"
#include "monitor/step_scalars.h"
#include "recompute/activation_checkpoint.h"
#include "tools/status_macros.h"
#include "trainer/bucket_notes.h"
#include "trainer/config/config_table.h"

namespace zerotrain::trainer {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr double kMiB = 1024.0 * 1024.0;
constexpr char kEvalLoss[] = "eval_loss";

std::string Tier(const char* what, engine::OffloadDevice d, const std::string& nvme_path,
                 bool pinned) {
  std::string tier = absl::StrCat(what, " -> ", engine::OffloadDeviceName(d));
  if (d == engine::OffloadDevice::kNvme) absl::StrAppend(&tier, " (", nvme_path, ")");
  if (d == engine::OffloadDevice::kCpu && pinned) absl::StrAppend(&tier, " (pinned)");
  return tier;
}

}  // namespace

std::string OffloadSummary(const engine::EngineOptions& o) {
  // Host memory is only page-locked when a GPU is there to copy from it.
  const bool cuda = o.device.is_cuda();
  return absl::StrCat(Tier("optimizer states", o.offload_optimizer.device,
                           o.offload_optimizer.nvme_path, cuda && o.offload_optimizer.pin_memory),
                      ", ",
                      Tier("params", o.offload_param.device, o.offload_param.nvme_path,
                           cuda && o.offload_param.pin_memory));
}

absl::StatusOr<std::unique_ptr<RunReport>> RunReport::Create(const TrainerConfig& config,
                                                             comm::ProcessGroup* group,
                                                             const engine::Engine& engine,
                                                             const Dataset& data,
                                                             const monitor::PhaseMemory& phases) {
  std::unique_ptr<RunReport> r(new RunReport(config, group, engine, phases));
  if (group->rank() != 0) return r;
  namespace n = monitor::names;
  std::vector<std::string> columns = {
      n::kLoss,         n::kLr,        n::kLossScale, n::kGradNorm,   n::kSamplesPerSec,
      n::kTokensPerSec, n::kMsPerStep, n::kForwardMs, n::kBackwardMs, n::kCommMs,
      n::kStepMs,       n::kRssMb,     n::kPeakRssMb};
  if (r->on_cuda()) {
    columns.push_back(n::kDevicePeakAllocatedMb);
    columns.push_back(n::kDevicePeakReservedMb);
  }
  columns.push_back(kEvalLoss);
  for (std::string& c : monitor::PhaseColumns(r->on_cuda())) columns.push_back(std::move(c));
  ZT_ASSIGN_OR_RETURN(r->sink_,
                      monitor::MetricsSink::Create(config.metrics, columns,
                                                   /*append=*/!config.run.resume_from.empty()));
  const engine::BatchSizes& b = engine.batch();
  const models::ModelOptions& m = config.model;
  const std::string shape =
      m.family == models::ModelFamily::kResNet
          ? absl::StrCat("ResNet-", m.depth, " ",
                         absl::StrFormat("%.2f", models::ModelParameterCount(m) / 1e6),
                         "M parameters (", m.num_classes, " classes)")
          : absl::StrCat(m.family == models::ModelFamily::kLlama ? "Llama" : "GPT", " ",
                         absl::StrFormat("%.2f", models::ModelParameterCount(m) / 1e6),
                         "M parameters (", m.n_layer, " layers, ", m.n_head, " heads, d_model ",
                         m.n_embd, ", context ", m.block_size, ")");
  const std::string ranks =
      absl::StrCat(group->world_size(), group->world_size() == 1 ? " rank" : " ranks");
  std::printf(
      "zerotrain: %s, %s (%s), ZeRO stage %d, %s\n"
      "zerotrain: batch %lld = micro %lld x accumulation %lld x %s; %lld steps; data: %s "
      "(%lld train / %lld eval %s)\n"
      "zerotrain: device %s | offload: %s\n",
      shape.c_str(), ranks.c_str(), DistBackendName(config.run.dist_backend), config.engine.stage,
      engine::PrecisionName(config.engine.precision), static_cast<long long>(b.train_batch_size),
      static_cast<long long>(b.micro_batch_size),
      static_cast<long long>(b.gradient_accumulation_steps), ranks.c_str(),
      static_cast<long long>(config.run.steps), data.source().c_str(),
      static_cast<long long>(data.train_tokens()), static_cast<long long>(data.eval_tokens()),
      data.unit(),
      r->on_cuda() ? absl::StrCat("cuda (rank 0 on ", config.engine.device.str(), ")").c_str()
                   : "cpu",
      OffloadSummary(config.engine).c_str());
  // Every setting the run uses, defaults and derived values included, as DeepSpeed's engine lists
  // its own: a log then says exactly how the run was configured.
  std::printf("%s", ConfigTable(config.effective).c_str());
  for (const std::string& note :
       WholeModelBufferNotes(config.engine, models::ModelParameterCount(m))) {
    std::printf("zerotrain: note: %s\n", note.c_str());
  }
  std::fflush(stdout);
  return r;
}

void RunReport::Start() {
  start_ = Now();
  skipped_seen_ = engine_.skipped_steps();
  scale_seen_ = engine_.loss_scale();
}

void RunReport::PrintSkipped(int64_t step) {
  const int64_t skipped = engine_.skipped_steps();
  const double scale = engine_.loss_scale();
  // One line per overflow, as DeepSpeed prints one: users grep logs for it.
  if (skipped > skipped_seen_ && group_->rank() == 0) {
    std::string line = absl::StrFormat(
        "step %lld: OVERFLOW, gradients hold inf/NaN: optimizer step skipped (%lld so far)",
        static_cast<long long>(step), static_cast<long long>(skipped));
    if (config_.engine.precision == engine::Precision::kFloat16) {
      absl::StrAppendFormat(&line, "; loss scale %.0f -> %.0f", scale_seen_, scale);
    }
    std::printf("%s\n", line.c_str());
  }
  skipped_seen_ = skipped;
  scale_seen_ = scale;
}

absl::StatusOr<RunReport::Memory> RunReport::MaxMemory() {
  ZT_ASSIGN_OR_RETURN(const monitor::MemoryUsage usage, monitor::ReadMemoryUsage());
  // The phases' peaks hold the run's: each phase restarts the process's high-water marks.
  std::vector<double> values = monitor::ToDoubles(phases_.Peaks());
  values.push_back(static_cast<double>(usage.rss_bytes));
  // One collective for all of them; every rank has the same device type, so the same length.
  at::Tensor v = at::tensor(values, at::TensorOptions().dtype(at::kDouble));
  ZT_RETURN_IF_ERROR(group_->AllReduce(v, comm::ReduceOp::kMax));
  const double* reduced = v.data_ptr<double>();
  values.assign(reduced, reduced + v.numel());
  Memory m;
  m.rss = values.back();
  values.pop_back();
  m.phases = monitor::FromDoubles(values);
  const monitor::PhasePeak run = monitor::RunPeak(m.phases);
  m.peak_rss = static_cast<double>(run.rss_bytes);
  m.device_peak_allocated = static_cast<double>(run.device_allocated_bytes);
  m.device_peak_reserved = static_cast<double>(run.device_reserved_bytes);
  peak_ = m;  // the phases keep their peaks over the run, so the latest reading holds them all
  return m;
}

absl::StatusOr<std::vector<std::pair<double, double>>> RunReport::DevicePeaksByRank() {
  // This rank's peaks over every phase (each phase restarts the allocator's).
  const monitor::PhasePeak d = monitor::RunPeak(phases_.Peaks());
  at::Tensor mine = at::tensor(
      {static_cast<double>(d.device_allocated_bytes), static_cast<double>(d.device_reserved_bytes)},
      at::kDouble);
  const int world = group_->world_size();
  at::Tensor all = at::empty({2 * world}, at::kDouble);
  ZT_RETURN_IF_ERROR(group_->AllGather(mine, all));
  std::vector<std::pair<double, double>> out;
  for (int r = 0; r < world; ++r) {
    out.emplace_back(all[2 * r].item<double>(), all[2 * r + 1].item<double>());
  }
  return out;
}

absl::Status RunReport::Step(int64_t step, double loss, double seconds) {
  PrintSkipped(step);
  if (++steps_run_ == 1) first_loss_ = loss;
  last_loss_ = loss;
  if (steps_run_ > 1) train_seconds_ += seconds;  // the first step pays one-off allocation costs
  window_seconds_ += seconds;
  ++window_steps_;
  const RunOptions& run = config_.run;
  const bool print = run.steps_per_print > 0 &&
                     (step % run.steps_per_print == 0 || steps_run_ == 1 || step == run.steps);
  Memory memory;
  if (print) {
    ZT_ASSIGN_OR_RETURN(memory, MaxMemory());
  }
  if (group_->rank() != 0) return absl::OkStatus();
  const engine::StepTimes& t = engine_.last_step_times();
  monitor::StepValues values;
  values.loss = loss;
  values.lr = engine_.lr();
  values.loss_scale = engine_.loss_scale();
  values.grad_norm = engine_.last_grad_norm();
  values.seconds = seconds;
  values.train_batch_size = engine_.batch().train_batch_size;
  values.fp16 = config_.engine.precision == engine::Precision::kFloat16;
  std::vector<monitor::Scalar> row = monitor::StepScalars(values);
  row.insert(row.end(), {
                            {monitor::names::kTokensPerSec,
                             static_cast<double>(values.train_batch_size) *
                                 models::TokensPerSample(config_.model) / seconds},
                            {monitor::names::kForwardMs, 1e3 * t.forward},
                            {monitor::names::kBackwardMs, 1e3 * t.backward},
                            {monitor::names::kCommMs, 1e3 * (t.backward_comm + t.allgather)},
                            {monitor::names::kStepMs, 1e3 * t.step},
                        });
  if (print) {
    row.push_back({monitor::names::kRssMb, memory.rss / kMiB});
    row.push_back({monitor::names::kPeakRssMb, memory.peak_rss / kMiB});
    if (on_cuda()) {
      row.push_back({monitor::names::kDevicePeakAllocatedMb, memory.device_peak_allocated / kMiB});
      row.push_back({monitor::names::kDevicePeakReservedMb, memory.device_peak_reserved / kMiB});
    }
    for (monitor::Scalar& s : monitor::PhaseScalars(memory.phases, on_cuda())) {
      row.push_back(std::move(s));
    }
    PrintProgress(step, loss, window_seconds_ / window_steps_, memory);
    window_seconds_ = 0;
    window_steps_ = 0;
  }
  ZT_RETURN_IF_ERROR(sink_->Write(step, row));
  // DeepSpeed's monitor tags, indexed by samples seen, for dashboards built on DeepSpeed runs.
  const int64_t seen = step * values.train_batch_size;
  return sink_->WriteTensorBoardOnly(seen, monitor::DeepSpeedScalars(values));
}

void RunReport::PrintProgress(int64_t step, double loss, double seconds,
                              const Memory& memory) const {
  const double samples = static_cast<double>(engine_.batch().train_batch_size) / seconds;
  std::string line = absl::StrFormat(
      "step %*lld/%lld | loss %.4f | lr %.3e | %.1f samples/s | %.0f tokens/s | %.0f ms/step | "
      "rss %.0f MiB (peak %.0f)",
      static_cast<int>(std::to_string(config_.run.steps).size()), static_cast<long long>(step),
      static_cast<long long>(config_.run.steps), loss, engine_.lr(), samples,
      samples * models::TokensPerSample(config_.model), 1e3 * seconds, memory.rss / kMiB,
      memory.peak_rss / kMiB);
  if (on_cuda()) {
    absl::StrAppendFormat(&line, " | cuda peak %.0f MiB allocated, %.0f MiB reserved",
                          memory.device_peak_allocated / kMiB, memory.device_peak_reserved / kMiB);
  }
  if (config_.engine.precision == engine::Precision::kFloat16) {
    absl::StrAppendFormat(&line, " | loss scale %.0f", engine_.loss_scale());
  }
  if (config_.run.wall_clock_breakdown) {
    const engine::StepTimes& t = engine_.last_step_times();
    absl::StrAppendFormat(&line,
                          "\n    time (ms): forward %.0f | backward %.0f | backward comm %.0f | "
                          "step %.0f | all-gather %.0f",
                          1e3 * t.forward, 1e3 * t.backward, 1e3 * t.backward_comm, 1e3 * t.step,
                          1e3 * t.allgather);
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

absl::Status RunReport::Eval(int64_t step, double eval_loss) {
  if (first_eval_loss_ < 0) first_eval_loss_ = eval_loss;
  last_eval_loss_ = eval_loss;
  if (group_->rank() != 0) return absl::OkStatus();
  std::printf("eval at step %lld: loss %.4f (perplexity %.2f)\n", static_cast<long long>(step),
              eval_loss, std::exp(eval_loss));
  std::fflush(stdout);
  if (step == resumed_step_) {
    resumed_step_ = -1;
    return absl::OkStatus();
  }
  const monitor::Scalar row[] = {{kEvalLoss, eval_loss}};
  return sink_->Write(step, row);
}

absl::Status RunReport::Saved(int64_t step, const std::string& tag_dir, double seconds) {
  last_checkpoint_ = tag_dir;
  if (group_->rank() != 0) return absl::OkStatus();
  std::printf("checkpoint at step %lld: %s (%.2f s)\n", static_cast<long long>(step),
              last_checkpoint_.c_str(), seconds);
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status RunReport::Resumed(const std::string& dir, int64_t step, const DataPosition& data) {
  resumed_step_ = step;
  if (group_->rank() != 0) return absl::OkStatus();
  std::printf(
      "zerotrain: resumed from %s at step %lld (optimizer step %lld); data position restored: "
      "sample %lld of epoch %lld\n",
      dir.c_str(), static_cast<long long>(step), static_cast<long long>(engine_.optimizer_steps()),
      static_cast<long long>(data.sample), static_cast<long long>(data.epoch));
  std::fflush(stdout);
  return sink_->DropRowsAfter(step);
}

absl::Status RunReport::Finish(bool memory_summary) {
  ZT_RETURN_IF_ERROR(MaxMemory().status());  // the peaks, up to now
  std::vector<std::pair<double, double>> device_peaks;
  if (on_cuda()) {
    ZT_ASSIGN_OR_RETURN(device_peaks, DevicePeaksByRank());
  }
  if (memory_summary) {
    // Rank by rank, so the lines do not interleave.
    for (int r = 0; r < group_->world_size(); ++r) {
      if (r == group_->rank()) {
        ZT_ASSIGN_OR_RETURN(monitor::MemoryUsage usage, monitor::ReadMemoryUsage());
        const monitor::PhasePeak run = monitor::RunPeak(phases_.Peaks());
        usage.peak_rss_bytes = run.rss_bytes;  // VmHWM restarts with each phase
        const engine::ModelStateBytes b = engine_.model_state_bytes();
        const std::string states = absl::StrFormat(
            "model states %.1f MiB: params %.1f, grads %.1f, master %.1f, optimizer %.1f "
            "(ZeRO formula %.1f MiB)",
            b.total() / kMiB, b.params / kMiB, b.grads / kMiB, b.master / kMiB,
            b.optimizer_states / kMiB, engine_.formula_bytes() / kMiB);
        std::vector<std::string> lines = {states};
        // This rank's own device; CPU runs have nothing to add.
        if (on_cuda()) {
          ZT_ASSIGN_OR_RETURN(monitor::DeviceMemoryStats device,
                              monitor::ReadCudaMemoryStats(config_.engine.device.index()));
          device.peak_allocated_bytes = run.device_allocated_bytes;
          device.peak_reserved_bytes = run.device_reserved_bytes;
          lines.push_back(monitor::DeviceMemoryLine(device));
        }
        std::printf("memory, rank %d:\n%s", r, monitor::MemorySummary(usage, lines).c_str());
        std::fflush(stdout);
      }
      ZT_RETURN_IF_ERROR(group_->Barrier());
    }
  }
  if (group_->rank() != 0) return absl::OkStatus();
  const int64_t steps = steps_run_;
  const double samples = static_cast<double>(engine_.batch().train_batch_size);
  const double per_rank =
      steps > 1 ? samples * (steps - 1) / train_seconds_ / group_->world_size() : 0;
  std::printf(
      "\nsummary: %lld steps in %.1f s | train loss %.4f -> %.4f | %s\n"
      "         %.2f samples/s (%.0f tokens/s) per rank, mean over all steps but the first | "
      "peak RSS %.0f MiB (largest rank) | model states %.1f MiB per rank\n",
      static_cast<long long>(steps), Now() - start_, first_loss_, last_loss_,
      first_eval_loss_ < 0
          ? "no eval split (data.eval_fraction = 0)"
          : absl::StrFormat("eval loss %.4f -> %.4f", first_eval_loss_, last_eval_loss_).c_str(),
      per_rank, per_rank * models::TokensPerSample(config_.model), peak_.peak_rss / kMiB,
      engine_.model_state_bytes().total() / kMiB);
  std::printf("         offload: %s\n", OffloadSummary(config_.engine).c_str());
  // Where the peak came from: RSS is what the system sees; allocated is what LibTorch's CPU
  // allocator and the offload pool hand out, counted by role (offload/memory_roles.h).
  std::printf("         memory by phase (MiB, largest rank%s):\n%s",
              phases_.rss_per_phase() ? "" : "; RSS is the process's peak up to each phase's end",
              monitor::PhaseTable(peak_.phases, on_cuda(), "           ").c_str());
  // What moving data between tiers cost this rank over the whole run (checkpoint saves included):
  // device<->host on a GPU (collectives staged through host memory, statistics reads), and NVMe.
  const engine::TierTraffic io = engine_.traffic();
  const double run_seconds = Now() - start_;
  if (on_cuda() && steps > 0) {
    std::printf(
        "         device<->host traffic, rank 0: to host %.2f MiB, to device %.2f MiB per step; "
        "%.0f MiB/s over the run\n",
        io.device_to_host / kMiB / steps, io.host_to_device / kMiB / steps,
        (io.device_to_host + io.host_to_device) / kMiB / run_seconds);
  }
  if (io.nvme_read + io.nvme_written > 0 && steps > 0) {
    std::printf(
        "         NVMe traffic, rank 0: read %.1f MiB, written %.1f MiB per step; %.0f MiB/s "
        "over the run\n",
        io.nvme_read / kMiB / steps, io.nvme_written / kMiB / steps,
        (io.nvme_read + io.nvme_written) / kMiB / run_seconds);
  }
  if (!device_peaks.empty()) {
    std::string line = "         cuda peak memory (caching allocator, MiB allocated / reserved):";
    for (size_t r = 0; r < device_peaks.size(); ++r) {
      absl::StrAppendFormat(&line, "%s rank %d %.0f / %.0f", r == 0 ? "" : ",", static_cast<int>(r),
                            device_peaks[r].first / kMiB, device_peaks[r].second / kMiB);
    }
    std::printf("%s\n", line.c_str());
  }
  if (!sink_->csv_path().empty()) std::printf("         csv: %s\n", sink_->csv_path().c_str());
  if (!sink_->tensorboard_path().empty()) {
    std::printf("         tensorboard: %s\n", sink_->tensorboard_path().c_str());
  }
  if (config_.engine.precision == engine::Precision::kFloat16) {
    std::printf("         fp16: %lld step(s) skipped on overflow, final loss scale %.0f\n",
                static_cast<long long>(engine_.skipped_steps()), engine_.loss_scale());
  } else if (engine_.skipped_steps() > 0) {
    std::printf("         %lld step(s) skipped: their gradients held inf/NaN\n",
                static_cast<long long>(engine_.skipped_steps()));
  }
  if (config_.model.checkpoint_every > 0) {
    const recompute::RecomputeStats rs = recompute::GetRecomputeStats();
    std::printf("         activation checkpointing: every %lld block(s)",
                static_cast<long long>(config_.model.checkpoint_every));
    if (config_.model.profile_checkpointing) {
      std::printf(", %lld recomputations on rank 0 took %.1f s (%.0f%% of training time)",
                  static_cast<long long>(rs.recomputations), rs.seconds,
                  100 * rs.seconds / std::max(1e-9, Now() - start_));
    }
    std::printf("\n");
  }
  if (last_checkpoint_.empty()) {
    std::printf("         checkpoints: none written (set run.save_interval)\n");
  } else {
    std::printf("         checkpoints: %s (latest: %s; resume with run.resume_from)\n",
                last_checkpoint_.substr(0, last_checkpoint_.rfind('/')).c_str(),
                last_checkpoint_.substr(last_checkpoint_.rfind('/') + 1).c_str());
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status RunReport::Sample(models::TrainerModel& model,
                               std::function<std::shared_ptr<void>()> forward_scope) {
  const bool rank0 = group_->rank() == 0;
  auto* lm = dynamic_cast<models::CausalLm*>(&model);
  if (config_.run.sample_tokens <= 0) return absl::OkStatus();
  if (lm == nullptr || config_.data.source == DataSource::kTokens) {
    if (rank0) {
      std::printf(
          "zerotrain: sample: none (%s)\n",
          lm == nullptr ? "not a language model" : "a token file's ids are not bytes to print");
    }
    std::fflush(stdout);
    return absl::OkStatus();
  }
  models::GenerateOptions g;
  g.max_new_tokens = config_.run.sample_tokens;
  g.seed = config_.run.seed;
  g.forward_scope = std::move(forward_scope);
  ZT_ASSIGN_OR_RETURN(const std::unique_ptr<models::Tokenizer> tokenizer,
                      models::LoadTokenizer(config_.data.tokenizer));
  ZT_ASSIGN_OR_RETURN(const std::string text, models::Generate(*lm, *tokenizer, "The ", g));
  if (rank0) {
    std::printf("\nsample (%lld tokens, temperature %.1f, top-k %lld):\n%s\n",
                static_cast<long long>(g.max_new_tokens), g.temperature,
                static_cast<long long>(g.top_k), text.c_str());
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace zerotrain::trainer
