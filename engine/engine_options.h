// EngineOptions: the knobs of the ZeRO engine, named after DeepSpeed's config keys, plus the two
// checks made before any rank allocates anything: the batch-size triple, and the fingerprint of
// options and model that all ranks must share.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/shard_optimizer.h"
#include "offload/async_file_io.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedules.h"
#include "optim/newton_schulz.h"
#include "optim/sgd.h"
#include "partition/stage3_options.h"

namespace zerotrain::partition {
class ShardedInit;
}

namespace zerotrain::engine {

// The option structs EngineOptions is written in, named here too, so that an application
// configures the engine through the engine's API alone, whichever library defines a struct.
using offload::AioOptions;
using offload::kIoAlignment;  // AioOptions::block_size is a multiple of it
using optim::LRRangeTestOptions;
using optim::LrScheduleOptions;
using optim::OneCycleOptions;
using optim::WarmupCosineLROptions;
using optim::WarmupDecayLROptions;
using optim::WarmupLROptions;
using optim::WarmupType;

enum class Precision { kFloat32, kBFloat16, kFloat16 };
const char* PrecisionName(Precision p);

// The built-in optimizers (kAdam covers AdamW through adam.adamw); each reads its own options
// struct in EngineOptions.
enum class OptimizerKind { kAdam, kSgd, kAdagrad, kLamb, kMuon };
const char* OptimizerKindName(OptimizerKind kind);  // "Adam", "SGD", "Adagrad", "Lamb", "Muon"

// Whether Muon steps a parameter, from its name (as named_parameters() spells it) and full shape.
using UseMuonFn = std::function<bool(const std::string& name, const std::vector<int64_t>& shape)>;
// DeepSpeed's rule (deepspeed.initialize tags every parameter so): two or more dimensions and a
// name that, lower-cased, contains neither "embed" nor "lm_head".
bool DeepSpeedUsesMuon(const std::string& name, const std::vector<int64_t>& shape);

// DeepSpeed 0.19.8's Muon ("MuonWithAuxAdam"): Muon for the parameters `use_muon` picks (each seen
// whole as rows x cols, its trailing dimensions flattened), Adam(W) with `adam` for the rest.
// engine/muon_gradients.h says how ZeRO's shards meet Newton-Schulz's whole matrices.
struct MuonOptions {
  double lr = 0.02;  // Muon's (muon_lr); adam.lr is Adam's (adam_lr)
  double momentum = 0.95;
  double weight_decay = 0.0;  // decoupled: p <- p (1 - lr wd) - lr update
  optim::NsMethod ns_method = optim::NsMethod::kGram;
  optim::AdamOptions adam = [] {
    optim::AdamOptions a;
    a.lr = 3e-4;
    a.beta2 = 0.95;
    a.eps = 1e-10;
    a.adamw = true;
    return a;
  }();
  UseMuonFn use_muon = DeepSpeedUsesMuon;
  // Where gradient clipping acts. false: on the updates, the norm taken over them and Adam's
  // gradients (DeepSpeed's ZeRO 1-3); true: on the raw gradients, before Muon sees them
  // (DeepSpeed's stage 0).
  bool orthogonalize_clipped = false;
};

// Where the fp32 master weights and optimizer states live (DeepSpeed's offload_optimizer).
// kNone: with the model ("device" memory; on a CPU-only machine that is host memory too);
// kCpu: in host memory from a PinnedHostPool (page-locked when pin_memory and a GPU is present);
// kNvme: in swap files under nvme_path, buffer_count sub-groups in host memory at a time.
enum class OffloadDevice { kNone, kCpu, kNvme };

// DeepSpeed's checkpoint.tag_validation: SaveCheckpoint checks that every rank was given the same
// tag (one small all-gather per save); a difference warns on stderr, or fails the save on every
// rank before anything is written.
enum class TagValidation { kIgnore, kWarn, kFail };
const char* OffloadDeviceName(OffloadDevice d);  // "none", "cpu", "nvme"

struct OptimizerOffloadOptions {
  OffloadDevice device = OffloadDevice::kNone;
  bool pin_memory = false;
  std::string nvme_path;  // kNvme: an existing, writable directory
  int buffer_count = 4;   // kNvme: sub-groups in host memory at once (>= 1)
  offload::AioOptions aio;
};

// Where stage 3 keeps each rank's parameter shard between uses (DeepSpeed's offload_param):
// kNone with the model; kCpu in host memory from a PinnedHostPool; kNvme in swap files under
// nvme_path, one per submodule's part, read when the part is gathered (or prefetched) and
// written after the optimizer step, except the first max_in_cpu elements, kept in host memory.
struct ParamOffloadOptions {
  OffloadDevice device = OffloadDevice::kNone;
  bool pin_memory = false;
  std::string nvme_path;
  int64_t max_in_cpu = 1000000000;
  offload::AioOptions aio;
};

struct EngineOptions {
  int stage = 0;  // ZeRO stage 0, 1, 2 or 3
  // Where the module, its gradients, the flat buffers and (without offload_optimizer) the fp32
  // master and optimizer states live: CPU, or one CUDA device (cuda:LOCAL_RANK). Create moves the
  // module there. The group's backend may run on another device: comm stages such tensors.
  c10::Device device = c10::Device(c10::kCPU);
  // The batch triple: 0 means "derive it"; train = micro x accumulation x world size.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;

  Precision precision = Precision::kFloat32;  // bf16/fp16 cast the module; master stays fp32
  // bf16 at stages 1-3 (DeepSpeed's bf16.bf16_master_weights_and_grads / bf16_optimizer_states):
  // the master weights, and then also the optimizer's state arrays, are kept in bf16, rounded to
  // nearest even after each step; the optimizer still computes in fp32 (MasterState). At stage 3
  // without offload_optimizer or offload_param a bf16 master is the parameter shard itself. The
  // gradients are the model's dtype (bf16) at every setting; those offload_optimizer nvme keeps on
  // disk stay fp32.
  bool bf16_master_weights = false;
  bool bf16_optimizer_states = false;  // needs bf16_master_weights
  optim::LossScalerOptions fp16;       // fp16 only
  // bf16 and fp32: an optimizer step whose gradients hold inf/NaN on any rank is skipped
  // (DeepSpeed's bf16.check_grad_overflow; fp16 always skips, through its loss scaler).
  bool check_grad_overflow = true;
  double gradient_clipping = 0.0;  // max global L2 norm; 0 = off

  bool overlap_comm = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;     // elements, as in DeepSpeed
  int64_t allgather_bucket_size = 500000000;  // elements in flight during the parameter all-gather
  bool ignore_unused_parameters = false;
  partition::Stage3Options stage3;  // stage 3 only
  // zero_quantized_gradients (ZeRO++ qgZ), stage 3: gradients are averaged by a two-level INT8
  // all-to-all (within each node, then across nodes; comm/quantized_reduce_scatter.h) instead of
  // a reduce-scatter. Needs the same number of ranks on every node, numbered node by node.
  bool quantize_gradients = false;
  // Stages 1-3. The optimizer steps its shard one sub-group of sub_group_size elements at a time
  // (whatever the device, so every device takes the same steps); with kNvme that is the unit
  // swapped in and out.
  OptimizerOffloadOptions offload_optimizer;
  int64_t sub_group_size = 1000000000;
  ParamOffloadOptions offload_param;  // stage 3 only
  // Stage 3: the module was partitioned while it was built (docs/STAGE3.md); must outlive Create.
  partition::ShardedInit* sharded_init = nullptr;

  OptimizerKind optimizer = OptimizerKind::kAdam;
  optim::AdamOptions adam = [] {
    optim::AdamOptions a;
    a.adamw = true;
    a.weight_decay = 0.01;
    return a;
  }();
  optim::SgdOptions sgd;
  optim::AdagradOptions adagrad;
  double adagrad_initial_accumulator = 0.0;  // torch's initial_accumulator_value
  optim::LambOptions lamb;
  MuonOptions muon;
  // DeepSpeed's scheduler section, stepped by the engine as DeepSpeed's engine steps its
  // lr_scheduler: before each optimizer step, Step sets the lr (and OneCycle's betas) the schedule
  // gives after the optimizer steps taken so far (a skipped fp16 step does not count);
  // std::monostate leaves the lr as the optimizer's options and set_lr make it.
  optim::LrScheduleOptions lr_schedule;
  TagValidation tag_validation = TagValidation::kWarn;
  // After each successful save, rank 0 keeps this many checkpoint tags in the directory (the one
  // `latest` names and the newest others) and removes older ones; 0 keeps all
  // (checkpoint/tag_retention.h).
  int64_t keep_last_checkpoints = 0;
  // Extension point: when set, the engine steps this optimizer instead of the built-in one.
  std::function<std::unique_ptr<ShardOptimizer>()> optimizer_factory;
};

// Whether the built-in optimizer has betas a schedule can cycle (Adam/AdamW and LAMB).
inline bool HasBetas(OptimizerKind kind) {
  return kind == OptimizerKind::kAdam || kind == OptimizerKind::kLamb ||
         kind == OptimizerKind::kMuon;
}

// The checks of `o` that need no process group: stage ranges and the options only some stages
// take, the device type, kernels the device lacks, the fp16 loss scaler's options, the LR
// schedule's, and a cycled momentum without betas. Engine::Create runs them first (prefixed with
// its rank); an app that validates its config once, before any rank starts, runs them too.
// InvalidArgument naming the option and value (Unimplemented for a missing kernel).
absl::Status ValidateEngineOptions(const EngineOptions& o);

// The schedule's own checks, a part of ValidateEngineOptions: OK when Engine::Create can build it.
absl::Status CheckLrSchedule(const LrScheduleOptions& schedule);

// The optimizer Engine::Create steps: optimizer_factory's when set, else the built-in one of
// `optimizer` from its options struct.
std::unique_ptr<ShardOptimizer> MakeShardOptimizer(const EngineOptions& o);
// The learning rate of the built-in optimizer's options (a schedule's base).
double BuiltInLr(const EngineOptions& o);

// The bucket size stage 3's layout uses, which a ShardedInit must be given.
inline int64_t Stage3BucketNumel(const EngineOptions& o) {
  return o.reduce_bucket_size < o.allgather_bucket_size ? o.reduce_bucket_size
                                                        : o.allgather_bucket_size;
}

struct BatchSizes {
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t gradient_accumulation_steps = 0;
};

// Fills in the missing members of the triple (any two give the third; only the micro batch gives
// GAS 1; only the train batch gives GAS 1 and micro = train / world) and rejects values that do
// not multiply out, with all four numbers in the message.
absl::StatusOr<BatchSizes> ResolveBatchSizes(const EngineOptions& options, int world_size);

// What every rank must agree on, as separately compared fingerprints so a mismatch can be named.
struct Fingerprint {
  std::vector<std::pair<std::string, uint64_t>> parts;  // ("options", h), ("parameter names", h)
};

struct ParamSignature {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
};

Fingerprint MakeFingerprint(const EngineOptions& options, const BatchSizes& batch,
                            const std::vector<ParamSignature>& params);

}  // namespace zerotrain::engine
