// Batch-size resolution, the built-in optimizer chosen by the options, and the cross-rank
// fingerprint (see engine_options.h).
#include "engine/engine_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerotrain::engine {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return "fp32";
    case Precision::kBFloat16:
      return "bf16";
    case Precision::kFloat16:
      return "fp16";
  }
  return "?";
}

const char* OffloadDeviceName(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
    default:
      return "none";
  }
}

absl::StatusOr<BatchSizes> ResolveBatchSizes(const EngineOptions& options, int world_size) {
  int64_t train = options.train_batch_size;
  int64_t micro = options.train_micro_batch_size_per_gpu;
  int64_t gas = options.gradient_accumulation_steps;
  const auto fail = [&](const char* why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch sizes: ", why, ": train_batch_size=", options.train_batch_size,
        " train_micro_batch_size_per_gpu=", options.train_micro_batch_size_per_gpu,
        " gradient_accumulation_steps=", options.gradient_accumulation_steps,
        " world_size=", world_size, " (need train = micro x accumulation x world size)"));
  };
  if (train < 0 || micro < 0 || gas < 0 || world_size < 1) return fail("negative value");
  if (train > 0 && micro > 0 && gas > 0) {
    if (train != micro * gas * world_size) return fail("the values do not multiply out");
  } else if (train > 0 && micro > 0) {
    if (train % (micro * world_size) != 0) return fail("train is not a multiple of micro x world");
    gas = train / (micro * world_size);
  } else if (train > 0 && gas > 0) {
    if (train % (gas * world_size) != 0) return fail("train is not a multiple of gas x world");
    micro = train / (gas * world_size);
  } else if (micro > 0) {
    if (gas == 0) gas = 1;
    train = micro * gas * world_size;
  } else if (train > 0) {
    gas = 1;
    if (train % world_size != 0) return fail("train is not a multiple of the world size");
    micro = train / world_size;
  } else {
    return fail("set at least train_batch_size or train_micro_batch_size_per_gpu");
  }
  return BatchSizes{train, micro, gas};
}

const char* OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "SGD";
    case OptimizerKind::kAdagrad:
      return "Adagrad";
    case OptimizerKind::kLamb:
      return "Lamb";
    case OptimizerKind::kMuon:
      return "Muon";
    default:
      return "Adam";
  }
}

bool DeepSpeedUsesMuon(const std::string& name, const std::vector<int64_t>& shape) {
  const std::string lower = absl::AsciiStrToLower(name);
  return shape.size() >= 2 && !absl::StrContains(lower, "embed") &&
         !absl::StrContains(lower, "lm_head");
}

absl::Status ValidateEngineOptions(const EngineOptions& o) {
  if (o.stage < 0 || o.stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", o.stage, " (ZeRO stages are 0, 1, 2 and 3)"));
  }
  if (o.offload_optimizer.device != OffloadDevice::kNone && o.stage == 0) {
    return absl::InvalidArgumentError(absl::StrCat("offload_optimizer ",
                                                   OffloadDeviceName(o.offload_optimizer.device),
                                                   " needs ZeRO stage 1-3"));
  }
  if (o.offload_param.device != OffloadDevice::kNone && o.stage != 3) {
    return absl::InvalidArgumentError(absl::StrCat("offload_param ",
                                                   OffloadDeviceName(o.offload_param.device),
                                                   " needs ZeRO stage 3 (stage is ", o.stage, ")"));
  }
  if (o.quantize_gradients && o.stage != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantize_gradients (ZeRO++ qgZ) needs ZeRO stage 3 (stage is ", o.stage, ")"));
  }
  if (!o.device.is_cpu() && !o.device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", o.device.str(), " (the engine runs on cpu or cuda)"));
  }
  // Offloaded optimizer states are stepped by the host kernels, whatever the model's device.
  if (o.device.is_cuda() && o.offload_optimizer.device == OffloadDevice::kNone &&
      o.optimizer != OptimizerKind::kAdam && o.optimizer != OptimizerKind::kMuon &&
      !o.optimizer_factory) {
    return absl::UnimplementedError(absl::StrCat(
        OptimizerKindName(o.optimizer), " has no CUDA kernel; use Adam/AdamW on ", o.device.str(),
        ", or offload_optimizer cpu/nvme (its host kernel steps there)"));
  }
  if (o.bf16_optimizer_states && !o.bf16_master_weights) {
    return absl::InvalidArgumentError(
        "bf16_optimizer_states needs bf16_master_weights (DeepSpeed: \"bf16_optimizer_states "
        "requires bf16_master_weights_and_grads to be enabled.\")");
  }
  if (o.bf16_master_weights && (o.stage == 0 || o.precision != Precision::kBFloat16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bf16_master_weights at stage ", o.stage, " with precision ", PrecisionName(o.precision),
        ": bf16 master weights are for a bf16 model at ZeRO stage 1, 2 or 3"));
  }
  if (o.keep_last_checkpoints < 0) {
    return absl::InvalidArgumentError(absl::StrCat("keep_last_checkpoints is ",
                                                   o.keep_last_checkpoints,
                                                   "; it must be >= 0 (0 keeps every checkpoint)"));
  }
  if (o.sharded_init != nullptr && o.stage != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ShardedInit partitions for stage 3; this engine is stage ", o.stage));
  }
  // Checked whatever the precision, as the trainer always did: a bad value is still a mistake.
  if (absl::StatusOr<optim::LossScaler> s = optim::LossScaler::Create(o.fp16); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("fp16: ", s.status().message()));
  }
  absl::StatusOr<std::unique_ptr<optim::LrSchedule>> schedule =
      optim::MakeLrSchedule(o.lr_schedule);
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("lr_schedule: ", schedule.status().message()));
  }
  if (*schedule != nullptr && (*schedule)->Momentum(0).has_value() && !o.optimizer_factory &&
      !HasBetas(o.optimizer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr_schedule cycles momentum (OneCycle's cycle_momentum), but ",
                     OptimizerKindName(o.optimizer), " has no betas to cycle"));
  }
  return absl::OkStatus();
}

absl::Status CheckLrSchedule(const LrScheduleOptions& schedule) {
  return optim::MakeLrSchedule(schedule).status();
}

std::unique_ptr<ShardOptimizer> MakeShardOptimizer(const EngineOptions& o) {
  if (o.optimizer_factory) return o.optimizer_factory();
  switch (o.optimizer) {
    case OptimizerKind::kSgd:
      return MakeSgdShardOptimizer(o.sgd);
    case OptimizerKind::kAdagrad:
      return MakeAdagradShardOptimizer(o.adagrad, o.adagrad_initial_accumulator);
    case OptimizerKind::kLamb:
      return MakeLambShardOptimizer(o.lamb);
    case OptimizerKind::kMuon:
      return MakeMuonShardOptimizer({o.muon.lr, o.muon.weight_decay, o.muon.adam});
    default:
      return MakeAdamShardOptimizer(o.adam);
  }
}

double BuiltInLr(const EngineOptions& o) {
  switch (o.optimizer) {
    case OptimizerKind::kSgd:
      return o.sgd.lr;
    case OptimizerKind::kAdagrad:
      return o.adagrad.lr;
    case OptimizerKind::kLamb:
      return o.lamb.lr;
    case OptimizerKind::kMuon:
      return o.muon.lr;
    default:
      return o.adam.lr;
  }
}

namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

Fingerprint MakeFingerprint(const EngineOptions& o, const BatchSizes& batch,
                            const std::vector<ParamSignature>& params) {
  std::string options = absl::StrCat(
      "stage=", o.stage, " batch=", batch.train_batch_size, "/", batch.micro_batch_size, "/",
      batch.gradient_accumulation_steps, " precision=", PrecisionName(o.precision),
      " clip=", o.gradient_clipping, " overlap=", o.overlap_comm, " rs=", o.reduce_scatter,
      " rbs=", o.reduce_bucket_size, " agbs=", o.allgather_bucket_size,
      " unused=", o.ignore_unused_parameters, " opt=", static_cast<int>(o.optimizer),
      " custom_opt=", static_cast<bool>(o.optimizer_factory), " lr=", BuiltInLr(o),
      " scale=", o.fp16.loss_scale, "/", o.fp16.initial_scale_power,
      " bf16_states=", o.bf16_master_weights, "/", o.bf16_optimizer_states);
  if (o.stage == 3) {
    // Persistence decides the layout, so it must agree; the other stage-3 knobs only steer
    // when gathers happen, which must also match across ranks for the collectives to pair up.
    absl::StrAppend(&options, " s3=", o.stage3.prefetch_numel, "/", o.stage3.max_live_numel, "/",
                    o.stage3.max_reuse_distance, "/", o.stage3.persistence_threshold, "/",
                    o.stage3.model_persistence_threshold, " qw=", o.stage3.quantize_weights,
                    " qg=", o.quantize_gradients, " hpz=", o.stage3.hpz_partition_size,
                    " init=", o.sharded_init != nullptr);
  }
  std::string names, shapes, dtypes;
  for (const ParamSignature& p : params) {
    absl::StrAppend(&names, p.name, ";");
    absl::StrAppend(&shapes, absl::StrJoin(p.shape, "x"), ";");
    absl::StrAppend(&dtypes, p.dtype, ";");
  }
  Fingerprint f;
  f.parts = {{"engine options", Fnv1a(options)},
             {"parameter count", static_cast<uint64_t>(params.size())},
             {"parameter names", Fnv1a(names)},
             {"parameter shapes", Fnv1a(shapes)},
             {"parameter dtypes", Fnv1a(dtypes)}};
  return f;
}

}  // namespace zerotrain::engine
