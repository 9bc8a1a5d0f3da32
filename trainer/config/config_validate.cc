// ValidateConfig, DeepSpeed sections → EngineOptions (config_validate.h). The trainer's own
// sections (model, data, run, monitors) are in config_validate_sections.cc.
#include "trainer/config/config_validate.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/config_validate_sections.h"

namespace zerotrain::trainer {
namespace {

absl::Status Invalid(const std::string& path, const std::string& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, " = ", value, ": ", why));
}
absl::Status NotYet(const std::string& path, const std::string& value, const std::string& why) {
  return absl::UnimplementedError(absl::StrCat(path, " = ", value, ": ", why));
}
std::string Quoted(const std::string& s) { return absl::StrCat("\"", s, "\""); }

// DeepSpeed features zerotrain does not have yet, when the config asks for them, and the offload
// devices' spelling (the offload sections themselves are OffloadToEngine's and
// ParamOffloadToEngine's).
absl::Status RejectUnimplemented(const TrainerConfigProto& c) {
  const ZeroOptimizationConfig& z = c.zero_optimization();
  const std::string od = z.offload_optimizer().device(), pd = z.offload_param().device();
  if (od != "none" && od != "cpu" && od != "nvme") {
    return Invalid("zero_optimization.offload_optimizer.device", Quoted(od),
                   "expected none, cpu or nvme");
  }
  if (pd != "none" && pd != "cpu" && pd != "nvme") {
    return Invalid("zero_optimization.offload_param.device", Quoted(pd),
                   "expected none, cpu or nvme");
  }
  // Below stage 3 DeepSpeed reads none of ZeRO++'s keys, and neither does zerotrain.
  if (z.zero_hpz_partition_size() < 0) {
    return Invalid("zero_optimization.zero_hpz_partition_size",
                   absl::StrCat(z.zero_hpz_partition_size()), "must be at least 0");
  }
  if (z.mics_shard_size() > 0) {
    return NotYet("zero_optimization.mics_shard_size", absl::StrCat(z.mics_shard_size()),
                  "MiCS is not implemented");
  }
  if (c.prescale_gradients()) {
    return NotYet("prescale_gradients", "true",
                  "not implemented (gradients are averaged after "
                  "the reduction)");
  }
  if (c.gradient_predivide_factor() != 1.0) {
    return NotYet("gradient_predivide_factor", absl::StrCat(c.gradient_predivide_factor()),
                  "not implemented (only 1.0)");
  }
  if (c.fp16().fp16_master_weights_and_grads()) {
    return NotYet("fp16.fp16_master_weights_and_grads", "true",
                  "not implemented (master weights are fp32)");
  }
  const CheckpointConfig& ck = c.checkpoint();
  if (ck.load_universal()) {
    return NotYet("checkpoint.load_universal", "true",
                  "not implemented: zerotrain checkpoints load on any world size and stage "
                  "without conversion, so leave it false");
  }
  if (ck.use_node_local_storage()) {
    return NotYet("checkpoint.use_node_local_storage", "true",
                  "not implemented: every rank writes into one shared checkpoint directory");
  }
  if (ck.parallel_write().pipeline_stage()) {
    return NotYet("checkpoint.parallel_write.pipeline_stage", "true",
                  "not implemented: zerotrain has no pipeline parallelism");
  }
  const std::string tag = absl::AsciiStrToLower(ck.tag_validation());
  if (tag != "ignore" && tag != "warn" && tag != "fail") {
    return Invalid("checkpoint.tag_validation", Quoted(ck.tag_validation()),
                   "expected Ignore, Warn or Fail");
  }
  return absl::OkStatus();
}

absl::Status ZeroToEngine(const TrainerConfigProto& c, int world, engine::EngineOptions* e,
                          std::vector<std::string>* warnings) {
  const ZeroOptimizationConfig& z = c.zero_optimization();
  if (z.stage() < 0 || z.stage() > 3) {
    return Invalid("zero_optimization.stage", absl::StrCat(z.stage()), "expected 0, 1, 2 or 3");
  }
  // Capped so that bucket and sub-group arithmetic (rounding up to the world size, bytes) cannot
  // overflow; 2^40 elements is terabytes, far beyond any bucket or sub-group that makes sense.
  constexpr int64_t kMaxBucket = int64_t{1} << 40;
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"zero_optimization.reduce_bucket_size",
                                        z.reduce_bucket_size()},
        {"zero_optimization.allgather_bucket_size", z.allgather_bucket_size()},
        {"zero_optimization.sub_group_size", z.sub_group_size()}}) {
    if (value <= 0 || value > kMaxBucket) {
      return Invalid(name, absl::StrCat(value), "must be in [1, 2^40] elements");
    }
  }
  if (!z.allgather_partitions()) {
    warnings->push_back(
        "zero_optimization.allgather_partitions = false: ignored; zerotrain "
        "always all-gathers the updated partitions");
  }
  if (z.stage() < 3) {
    for (const auto& [key, on] :
         {std::pair<const char*, bool>{"zero_quantized_weights", z.zero_quantized_weights()},
          {"zero_quantized_gradients", z.zero_quantized_gradients()},
          {"zero_hpz_partition_size", z.zero_hpz_partition_size() > 1}}) {
      if (!on) continue;
      warnings->push_back(absl::StrCat("zero_optimization.", key,
                                       ": ignored below stage 3 (ZeRO++ partitions and "
                                       "quantizes stage 3's communication; so does DeepSpeed)"));
    }
  }
  e->stage = z.stage();
  e->overlap_comm = z.has_overlap_comm() ? z.overlap_comm() : z.stage() == 3;
  e->reduce_scatter = z.reduce_scatter();
  e->reduce_bucket_size = z.reduce_bucket_size();
  e->allgather_bucket_size = z.allgather_bucket_size();
  e->ignore_unused_parameters = z.ignore_unused_parameters();
  e->sub_group_size = z.sub_group_size();
  if (z.stage() == 3) {
    for (const auto& [name, value] :
         {std::pair<const char*, int64_t>{"zero_optimization.stage3_prefetch_bucket_size",
                                          z.stage3_prefetch_bucket_size()},
          {"zero_optimization.stage3_max_live_parameters", z.stage3_max_live_parameters()},
          {"zero_optimization.stage3_max_reuse_distance", z.stage3_max_reuse_distance()},
          {"zero_optimization.stage3_param_persistence_threshold",
           z.stage3_param_persistence_threshold()},
          {"zero_optimization.stage3_model_persistence_threshold",
           z.stage3_model_persistence_threshold()}}) {
      if (value < 0) return Invalid(name, absl::StrCat(value), "must be >= 0 (elements)");
    }
    e->stage3.prefetch_numel = z.stage3_prefetch_bucket_size();
    e->stage3.max_live_numel = z.stage3_max_live_parameters();
    e->stage3.max_reuse_distance = z.stage3_max_reuse_distance();
    e->stage3.persistence_threshold = z.stage3_param_persistence_threshold();
    e->stage3.model_persistence_threshold = z.stage3_model_persistence_threshold();
    e->stage3.quantize_weights = z.zero_quantized_weights();
    e->quantize_gradients = z.zero_quantized_gradients();
    const int64_t hpz = std::max<int64_t>(1, z.zero_hpz_partition_size());
    if (hpz > 1 && world % hpz != 0) {
      return Invalid("zero_optimization.zero_hpz_partition_size", absl::StrCat(hpz),
                     absl::StrCat("must divide the world size (", world,
                                  " ranks): hpZ shards its secondary copy over groups of that "
                                  "many consecutive ranks, one node each"));
    }
    e->stage3.hpz_partition_size = static_cast<int>(hpz);
  }
  if (c.gradient_clipping() < 0) {
    return Invalid("gradient_clipping", absl::StrCat(c.gradient_clipping()), "must be >= 0");
  }
  e->gradient_clipping = c.gradient_clipping();
  return absl::OkStatus();
}

// zero_optimization.offload_optimizer → EngineOptions::offload_optimizer (its aio is copied with
// the aio section, config_monitors.cc). With device "none" the rest of the section is ignored.
absl::Status OffloadToEngine(const ZeroOptimizationConfig& z, engine::EngineOptions* e,
                             std::vector<std::string>* warnings) {
  const OffloadOptimizerConfig& o = z.offload_optimizer();
  if (o.device() == "none") return absl::OkStatus();
  const std::string field = "zero_optimization.offload_optimizer.";
  if (z.stage() == 0) {
    return Invalid(field + "device", Quoted(o.device()),
                   "optimizer offload needs zero_optimization.stage >= 1 (stage is 0)");
  }
  if (o.device() == "nvme" && o.nvme_path().empty()) {
    return Invalid(field + "nvme_path", Quoted(o.nvme_path()),
                   "device \"nvme\" needs a directory for the swap files");
  }
  if (o.buffer_count() < 1 || o.buffer_count() > std::numeric_limits<int>::max()) {
    return Invalid(field + "buffer_count", absl::StrCat(o.buffer_count()),
                   "must be >= 1 and < 2^31 (sub-groups held in host memory at once)");
  }
  if (o.ratio() != 1.0) {
    return NotYet(field + "ratio", absl::StrCat(o.ratio()),
                  "partial optimizer offload is not implemented (only 1.0)");
  }
  for (const auto& [name, on] : {std::pair<const char*, bool>{"pipeline_read", o.pipeline_read()},
                                 {"pipeline_write", o.pipeline_write()}}) {
    if (on) {
      warnings->push_back(absl::StrCat(field, name,
                                       " = true: ignored; zerotrain always overlaps the swap "
                                       "reads and writes with the optimizer step"));
    }
  }
  engine::OptimizerOffloadOptions& out = e->offload_optimizer;
  out.device = o.device() == "cpu" ? engine::OffloadDevice::kCpu : engine::OffloadDevice::kNvme;
  out.pin_memory = o.pin_memory();
  out.nvme_path = o.nvme_path();
  out.buffer_count = static_cast<int>(o.buffer_count());
  return absl::OkStatus();  // fast_init: swap files are preallocated and read as zeros
}

// zero_optimization.offload_param → EngineOptions::offload_param (stage 3 only; its aio is the
// aio section's, config_monitors.cc). buffer_count and buffer_size size DeepSpeed's swap-in
// buffers; here a swapped-in part is one submodule's share and lives while it is gathered, so
// they have nothing to size and are accepted as they are.
absl::Status ParamOffloadToEngine(const ZeroOptimizationConfig& z, engine::EngineOptions* e) {
  const OffloadParamConfig& o = z.offload_param();
  if (o.device() == "none") return absl::OkStatus();
  const std::string field = "zero_optimization.offload_param.";
  if (z.stage() != 3) {
    return Invalid(field + "device", Quoted(o.device()),
                   absl::StrCat("parameter offload needs zero_optimization.stage 3 (stage is ",
                                z.stage(), ")"));
  }
  if (o.device() == "nvme" && o.nvme_path().empty()) {
    return Invalid(field + "nvme_path", Quoted(o.nvme_path()),
                   "device \"nvme\" needs a directory for the swap files");
  }
  if (o.max_in_cpu() < 0) {
    return Invalid(field + "max_in_cpu", absl::StrCat(o.max_in_cpu()), "must be >= 0 (elements)");
  }
  engine::ParamOffloadOptions& out = e->offload_param;
  out.device = o.device() == "cpu" ? engine::OffloadDevice::kCpu : engine::OffloadDevice::kNvme;
  out.pin_memory = o.pin_memory();
  out.nvme_path = o.nvme_path();
  out.max_in_cpu = o.max_in_cpu();
  return absl::OkStatus();
}

absl::Status PrecisionToEngine(const TrainerConfigProto& c, engine::EngineOptions* e) {
  if (c.fp16().enabled() && c.bf16().enabled()) {
    return Invalid("fp16.enabled and bf16.enabled", "true", "enable at most one of them");
  }
  e->precision = c.bf16().enabled()   ? engine::Precision::kBFloat16
                 : c.fp16().enabled() ? engine::Precision::kFloat16
                                      : engine::Precision::kFloat32;
  e->check_grad_overflow = !c.bf16().enabled() || c.bf16().check_grad_overflow();
  const Fp16Config& f = c.fp16();
  e->fp16.loss_scale = f.loss_scale();
  e->fp16.initial_scale_power = f.initial_scale_power();
  e->fp16.loss_scale_window = f.loss_scale_window();
  e->fp16.hysteresis = f.hysteresis();
  e->fp16.consecutive_hysteresis = f.consecutive_hysteresis();
  e->fp16.min_loss_scale = f.min_loss_scale();
  return absl::OkStatus();  // the loss scaler's own checks: ValidateEngineOptions
}

// DeepSpeed's bf16.bf16_master_weights_and_grads and bf16_optimizer_states: its config's checks
// and its ZeRO optimizers' (_configure_master_weights), in its words, once the optimizer is known.
// bf16 master weights without bf16 states, or with offload_optimizer, need DeepSpeedCPUAdam, whose
// fp32_optimizer_states false keeps the moments in the master's bf16 too.
absl::Status Bf16MasterToEngine(const TrainerConfigProto& c, engine::EngineOptions* e) {
  const Bf16Config& b = c.bf16();
  const std::string stage = absl::StrCat(" (zero_optimization.stage is ", e->stage, ")");
  if (b.bf16_master_weights_and_grads() && e->stage == 0) {
    return Invalid(
        "bf16.bf16_master_weights_and_grads", "true",
        "Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3" + stage);
  }
  if (b.bf16_optimizer_states() && e->stage == 0) {
    return Invalid("bf16.bf16_optimizer_states", "true",
                   "bf16_optimizer_states is only supported with ZeRO Stage 1, 2, or 3" + stage);
  }
  if (b.bf16_optimizer_states() && !b.bf16_master_weights_and_grads()) {
    return Invalid("bf16.bf16_optimizer_states", "true",
                   "bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled");
  }
  if (!b.bf16_master_weights_and_grads()) return absl::OkStatus();
  if (!b.enabled()) {
    return Invalid(
        "bf16.bf16_master_weights_and_grads", "true",
        "needs bf16.enabled true (zerotrain keeps bf16 master weights for a bf16 model)");
  }
  const OptimizerParams& p = c.optimizer().params();
  const bool offloaded = e->offload_optimizer.device != engine::OffloadDevice::kNone;
  const bool cpu_adam =
      offloaded && e->optimizer == engine::OptimizerKind::kAdam && !p.torch_adam();
  if ((!b.bf16_optimizer_states() || offloaded) && !cpu_adam) {
    return Invalid(
        "bf16.bf16_master_weights_and_grads", "true",
        absl::StrCat("Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam "
                     "(offload_optimizer.device \"",
                     engine::OffloadDeviceName(e->offload_optimizer.device), "\", optimizer \"",
                     c.optimizer().type(), "\"", p.torch_adam() ? " with torch_adam" : "",
                     b.bf16_optimizer_states() ? "" : "; without bf16_optimizer_states", ")"));
  }
  e->bf16_master_weights = true;
  e->bf16_optimizer_states =
      b.bf16_optimizer_states() ||
      (cpu_adam && p.has_fp32_optimizer_states() && !p.fp32_optimizer_states());
  return absl::OkStatus();
}

}  // namespace

const char* DistBackendName(const DistBackend& backend) {
  return backend.has_value() ? comm::BackendName(*backend) : "auto";
}

absl::StatusOr<TrainerConfig> ValidateConfig(const TrainerConfigProto& config, int world_size,
                                             std::vector<std::string>* warnings) {
  // Every section is read from `config`, whose getters give the declared defaults; `effective`
  // collects the values used, for PrintConfig.
  TrainerConfig out;
  out.effective = config;
  FillDefaults(&out.effective);
  ZT_RETURN_IF_ERROR(RejectUnimplemented(config));
  ZT_RETURN_IF_ERROR(ZeroToEngine(config, world_size, &out.engine, warnings));
  out.effective.mutable_zero_optimization()->set_overlap_comm(out.engine.overlap_comm);
  ZT_RETURN_IF_ERROR(OffloadToEngine(config.zero_optimization(), &out.engine, warnings));
  ZT_RETURN_IF_ERROR(ParamOffloadToEngine(config.zero_optimization(), &out.engine));
  ZT_RETURN_IF_ERROR(PrecisionToEngine(config, &out.engine));
  ZT_RETURN_IF_ERROR(OptimizerToEngine(config, &out.engine, &out.effective));
  ZT_RETURN_IF_ERROR(Bf16MasterToEngine(config, &out.engine));

  // RejectUnimplemented has checked the spelling.
  const std::string tag = absl::AsciiStrToLower(config.checkpoint().tag_validation());
  out.engine.tag_validation = tag == "ignore" ? engine::TagValidation::kIgnore
                              : tag == "fail" ? engine::TagValidation::kFail
                                              : engine::TagValidation::kWarn;
  ZT_RETURN_IF_ERROR(CheckBatchFields(config));
  out.engine.train_batch_size = config.train_batch_size();
  out.engine.train_micro_batch_size_per_gpu = config.train_micro_batch_size_per_gpu();
  out.engine.gradient_accumulation_steps = config.gradient_accumulation_steps();
  ZT_ASSIGN_OR_RETURN(out.batch, engine::ResolveBatchSizes(out.engine, world_size));
  out.effective.set_train_batch_size(out.batch.train_batch_size);
  out.effective.set_train_micro_batch_size_per_gpu(out.batch.micro_batch_size);
  out.effective.set_gradient_accumulation_steps(out.batch.gradient_accumulation_steps);

  ZT_RETURN_IF_ERROR(RunFromConfig(config, &out.run));
  out.engine.keep_last_checkpoints = config.run().keep_last_checkpoints();
  ZT_ASSIGN_OR_RETURN(out.scheduler,
                      ScheduleFromConfig(config.scheduler(), engine::BuiltInLr(out.engine),
                                         out.run.steps, out.effective.mutable_scheduler()));
  if (!config.has_scheduler()) out.effective.clear_scheduler();
  if (auto* cycle = std::get_if<engine::OneCycleOptions>(&out.scheduler.options);
      cycle != nullptr && cycle->cycle_momentum && !engine::HasBetas(out.engine.optimizer)) {
    // DeepSpeed does the same for an optimizer without betas, with a warning.
    cycle->cycle_momentum = false;
    out.effective.mutable_scheduler()->mutable_params()->set_cycle_momentum(false);
    warnings->push_back(absl::StrCat(
        "scheduler.params.cycle_momentum: ", engine::OptimizerKindName(out.engine.optimizer),
        " has no betas to cycle; OneCycle cycles only the lr"));
  }
  out.engine.lr_schedule = out.scheduler.options;  // the Engine steps it, as DeepSpeed's does
  // The engine's checks that need no process group, once, before any rank starts (those of the
  // device come with each rank's placement, PlaceRank, and again at Engine::Create).
  ZT_RETURN_IF_ERROR(engine::ValidateEngineOptions(out.engine));
  ZT_RETURN_IF_ERROR(ModelFromConfig(config, &out, warnings));
  ZT_RETURN_IF_ERROR(DataFromConfig(config, &out.data, &out.effective));
  // Images feed the classifiers, tokens the language models.
  if ((out.model.family == models::ModelFamily::kResNet) !=
      (out.data.source == DataSource::kImages)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.source = \"", out.effective.data().source(), "\": model.name \"",
        models::ModelName(out.model), "\" trains on ",
        out.model.family == models::ModelFamily::kResNet ? "data.source \"images\""
                                                         : "text or tokens, not images"));
  }
  ZT_RETURN_IF_ERROR(MonitorsFromConfig(config, &out, warnings));
  return out;
}

}  // namespace zerotrain::trainer
