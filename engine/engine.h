// Engine: the ZeRO training engine, stages 0-3 (zerotrain's deepspeed.initialize). The caller
// runs forward with its own code inside a forward scope, then per micro-batch:
//   at::Tensor loss;
//   { auto forward = engine->BeginForward(); loss = compute_loss(model->forward(x)); }
//   ZT_RETURN_IF_ERROR(engine->Backward(loss));  // scales by 1/GAS (x loss scale), reduces
//   ZT_RETURN_IF_ERROR(engine->Step());          // steps only at the accumulation boundary
// What the stages do differently with the parameters sits behind a ParamStore (param_store.h),
// chosen once in Create: stages 0-2 move the module's trainable parameters into a flat buffer
// (FlatStore); stage 3 shards them and gathers each submodule's on use (ShardedStore), which is
// what the forward scope is for (at stages 0-2 it does nothing). Gradients are reduced in buckets
// (partition/GradientReducer), fp32 master weights are stepped by a ShardOptimizer, and updated
// parameters are all-gathered at stages 1 and 2. See docs/ENGINE.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "comm/quantized_reduce_scatter.h"
#include "engine/device_runtime.h"
#include "engine/engine_options.h"
#include "engine/model_state.h"
#include "engine/model_tensors.h"
#include "engine/param_store.h"
#include "engine/shard_optimizer.h"
#include "engine/step_clock.h"
#include "optim/loss_scaler.h"
#include "partition/flat_params.h"
#include "partition/gradient_reducer.h"
#include "partition/sharded_params.h"

namespace torch::nn {
class Module;
}
namespace zerotrain::checkpoint {
class CheckpointReader;
class Manifest;
struct TagLocation;
struct WrittenFile;
class ShardStreamWriter;
}  // namespace zerotrain::checkpoint
namespace zerotrain::offload {
class PinnedHostPool;
class SubGroupStore;
struct SubGroupView;
class SwapSpace;
class TransferStream;
}  // namespace zerotrain::offload

namespace zerotrain::engine {

class MasterState;
class MuonGradients;
class StoreGradSink;

// What Step learns of the gradients before the optimizer runs.
struct GradStats {
  bool overflow = false;      // some rank's gradients hold inf/NaN (fp16: skip the step)
  double sum_of_squares = 0;  // of the global gradient, when clipping
};

// Bytes moved between memory tiers since Create: between the device and host memory (none on a
// CPU device) and between host memory and NVMe (offload_optimizer/offload_param nvme).
// Checkpoint saves and loads are included.
struct TierTraffic {
  int64_t device_to_host = 0;  // collectives' staging, the step's statistics read, saves
  int64_t host_to_device = 0;
  int64_t nvme_read = 0;
  int64_t nvme_written = 0;
};

class Engine {
 public:
  // Collective: every rank of `group` must call it with an identical module and options. The
  // module must outlive the engine; its parameters become views of the engine's flat buffer
  // (cast to bf16/fp16 first when options.precision says so).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(torch::nn::Module& module,
                                                        const EngineOptions& options,
                                                        comm::ProcessGroup* group);
  // The same for a model given as its tensors (model_tensors.h), which need not belong to a
  // LibTorch module (python/'s binding passes a Python module's). Each tensor is moved to
  // options.device and, with bf16/fp16, each floating-point one cast to that type, in place
  // (set_data), as Module::to does; the tensors must outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(ModelTensors model,
                                                        const EngineOptions& options,
                                                        comm::ProcessGroup* group);
  ~Engine();

  // Stage 3 lets parameters be read (gathered on use) only while a forward scope is open, or in
  // Backward, or inside GatheredParameters; elsewhere their shape is [0]. A failed gather inside
  // forward surfaces as a c10::Error from the operator that needed it.
  class ForwardScope {
   public:
    ForwardScope(ForwardScope&& other) noexcept : store_(other.store_) { other.store_ = nullptr; }
    ForwardScope& operator=(ForwardScope&&) = delete;
    ~ForwardScope();

   private:
    friend class Engine;
    explicit ForwardScope(ParamStore* store) : store_(store) {}
    ParamStore* store_;
  };
  ForwardScope BeginForward();

  absl::Status Backward(const at::Tensor& loss);
  absl::Status Step();

  // deepspeed.zero.GatheredParameters: while open, the chosen parameters hold their full values
  // on every rank (stage 3 gathers them; stages 0-2 hold them anyway). With a modifier rank, Close
  // makes that rank's values everyone's: it broadcasts them and writes them into the shards and
  // fp32 master weights. Open and Close are collective.
  class GatheredParameters {
   public:
    ~GatheredParameters();  // closes if still open; an error is printed, so call Close()
    absl::Status Close();

   private:
    friend class Engine;
    GatheredParameters(Engine* engine, std::vector<int> params, int modifier_rank)
        : engine_(engine), params_(std::move(params)), modifier_rank_(modifier_rank) {}
    Engine* engine_;
    std::vector<int> params_;
    int modifier_rank_;
    bool open_ = true;
  };
  // `params` are the module's trainable parameters (as the module holds them); modifier_rank -1
  // means read only.
  absl::StatusOr<std::unique_ptr<GatheredParameters>> GatherParameters(
      const std::vector<at::Tensor>& params, int modifier_rank = -1);
  // The shape the parameter has when gathered (stage 3 shows [0] outside a scope).
  std::vector<int64_t> FullShape(const at::Tensor& param) const;
  // Stage 3's gathering statistics (all zero below stage 3).
  partition::GatherStats gather_stats() const { return store_->gather_stats(); }
  void ResetGatherPeak() { store_->ResetGatherPeak(); }

  bool at_accumulation_boundary() const;  // the next Step() will step the optimizer
  int64_t micro_steps() const { return micro_steps_; }
  int64_t optimizer_steps() const { return optimizer_steps_; }  // taken, not skipped
  int64_t skipped_steps() const { return skipped_steps_; }
  double loss_scale() const;
  // The last optimizer step's global gradient L2 norm (unscaled); infinity when that step was
  // skipped; 0 when no statistics are computed (bf16/fp32 with check_grad_overflow off and no
  // clipping).
  double last_grad_norm() const { return last_grad_norm_; }
  const BatchSizes& batch() const { return batch_; }
  // The last optimizer step's phase times (step_clock.h): device time from events on a GPU.
  // There, the first read after a step waits until the device has finished that step.
  const StepTimes& last_step_times() const { return clock_->LastStep(); }
  ModelStateBytes model_state_bytes() const;
  TierTraffic traffic() const;
  double formula_bytes() const;  // ZeroFormulaBytes for this configuration
  // The layout and parameter list; at stage 3 without a flat buffer (flat() is undefined).
  const partition::FlatParams& flat_params() const { return store_->flat_params(); }
  // This rank's fp32 master weights (a copy; read from NVMe when offloaded there).
  absl::StatusOr<at::Tensor> MasterCopy() const;
  // With options.lr_schedule, Step sets the lr (and betas) itself before each optimizer step.
  void set_lr(double lr);
  double lr() const { return lr_; }  // the built-in optimizer's lr until set_lr or a schedule
  // The lr the next optimizer step will run with: with a schedule, its value for the steps taken
  // so far (what DeepSpeed's get_lr() reports after a step); lr() without one.
  double next_lr() const;
  // Random per Create, rank 0's on every rank: what this run's checkpoint files record.
  uint64_t run_id() const { return run_id_; }
  absl::Status set_betas(double beta1, double beta2);

  // Training-state checkpoints (docs/CHECKPOINT.md), both collective. Save writes this rank's
  // shard file (recording run id, tag, step, rank, world size and stage) into <dir>/<tag>/, then
  // rank 0 the manifest and <dir>/latest, then prunes old tags beyond
  // options.keep_last_checkpoints; tag "" means "global_step<optimizer steps>". Call it after
  // Step() at an accumulation boundary.
  absl::Status SaveCheckpoint(const std::string& dir, const std::string& tag = "",
                              const std::map<std::string, std::string>& client_state = {});
  // Restores master weights, optimizer states (re-sliced for this world size and stage),
  // parameters, loss scaler, step counters, lr and, when the world size matches, this rank's CPU
  // RNG; returns the client state saved with it. tag "" = the one <dir>/latest names. Every shard
  // file must be the one the manifest lists (identity, and whole-file CRC32C, the ranks sharing
  // the files between them); a misplaced file fails the load naming it.
  absl::StatusOr<std::map<std::string, std::string>> LoadCheckpoint(const std::string& dir,
                                                                    const std::string& tag = "");

 private:
  Engine() = default;
  // Exchanges fingerprints (and whether `local`, this rank's own setup check, failed) with every
  // rank; returns `local`'s error, or one naming what differs across ranks. Sets run_id_ to
  // rank 0's candidate, which travels in the same exchange.
  absl::Status CheckRanksAgree(const std::vector<ParamSignature>& params,
                               const absl::Status& local);
  // Frozen parameters and buffers from rank 0 (the store broadcasts the trainable ones).
  absl::Status BroadcastFrozenState();
  absl::Status CloseGathered(const std::vector<int>& params, int modifier_rank);
  // The host memory pool and the swap spaces offload_optimizer and offload_param ask for.
  absl::Status InitOffload();
  // Where stage 3's parameter shard goes (offload_param), after InitOffload.
  partition::ParamShardOptions ParamShardOptionsFor() const;
  // Host checks of collectives that only ordered the device stream (the reductions, stage 1/2's
  // all-gather): where a transport runs on a stream, its errors and timeouts surface here. Called
  // once per optimizer step and before the host reads state.
  absl::Status WaitStreamOrdered(const std::string& where) const;
  // Whether any rank's gradients overflowed and their global sum of squares (when clipping),
  // agreed in one collective; the step's one host synchronisation (see grad_stats.h).
  absl::StatusOr<GradStats> AgreeGradStats(const std::vector<partition::GradSegment>& grads);
  // The optimizer half of Step(), at the accumulation boundary; LibTorch may throw inside.
  absl::Status StepAtBoundary();
  // The gradients and outputs staged where the state lives, the optimizer, the outputs back.
  absl::Status StageAndStep(const std::vector<partition::GradSegment>& grads, double grad_scale);
  absl::Status AgreeAllOk(const absl::Status& local, const std::string& where) {
    return engine::AgreeAllOk(group_, local, where);
  }
  absl::Status CheckModelMatches(const checkpoint::CheckpointReader& reader) const;
  // options_.tag_validation: whether every rank's tag is this rank's (collective unless kIgnore).
  absl::Status CheckTagAgrees(const std::string& tag) const;
  // SaveCheckpoint's phases: this rank's file (the spans of the state its checkpoint layout
  // holds, and the RNG), and the manifest rank 0 commits.
  absl::Status WriteRankShard(const checkpoint::TagLocation& at,
                              checkpoint::WrittenFile* written) const;
  absl::Status AppendState(const std::vector<MasterSpan>& spans,
                           checkpoint::ShardStreamWriter* file) const;
  // LoadCheckpoint's overwrite of the master, the optimizer states and the model's copy, read
  // from `reader` one sub-group at a time.
  absl::Status ReadStateFrom(checkpoint::CheckpointReader& reader);
  checkpoint::Manifest SaveManifest(const std::map<std::string, std::string>& client_state) const;
  // Rank 0, after a save committed: options_.keep_last_checkpoints (a failure only warns).
  void PruneOldTags(const std::string& dir) const;

  EngineOptions options_;
  BatchSizes batch_;
  comm::ProcessGroup* group_ = nullptr;
  ModelTensors model_;  // the frozen parameters and buffers are read from here
  // Before the parameters and the store, which hold blocks and regions of them.
  // Of options_.device, chosen at Create; declared first so that it outlives the master state
  // and the staging, which point at it.
  std::unique_ptr<DeviceRuntime> runtime_;
  std::unique_ptr<offload::PinnedHostPool> host_pool_;
  std::unique_ptr<offload::SwapSpace> swap_;        // offload_optimizer nvme
  std::unique_ptr<offload::SwapSpace> param_swap_;  // offload_param nvme
  // Copies between host memory and the model's device beside compute (the CPU's: at once).
  std::unique_ptr<offload::TransferStream> transfer_;
  std::unique_ptr<ParamStore> store_;                 // FlatStore or ShardedStore
  std::unordered_map<const void*, int> param_index_;  // TensorImpl -> parameter
  // offload_optimizer nvme: where the reducer puts the gradients (the state store); outlives it.
  std::unique_ptr<StoreGradSink> grad_sink_;
  comm::NodeGroups node_groups_;  // quantize_gradients: the reducer's two groups
  std::unique_ptr<partition::GradientReducer> reducer_;
  std::unique_ptr<optim::LossScaler> scaler_;
  std::unique_ptr<optim::LrSchedule> schedule_;  // options_.lr_schedule; null = constant lr
  // The fp32 master weights and optimizer states, their optimizer and the staging to them.
  std::unique_ptr<MasterState> master_;
  // Muon: its parameters' gradients become their updates before the norm; null otherwise.
  std::unique_ptr<MuonGradients> muon_;

  // Set when a Step or a load failed part-way; Step and SaveCheckpoint refuse until a load
  // succeeds.
  absl::Status broken_;
  absl::Status BrokenError() const;
  bool backward_pending_ = false;
  int64_t micro_steps_ = 0;
  int64_t optimizer_steps_ = 0;
  int64_t skipped_steps_ = 0;
  double last_grad_norm_ = 0;
  double lr_ = 0;
  uint64_t run_id_ = 0;
  std::unique_ptr<StepClock> clock_;  // laps at each call's start and end, and inside Step
  // The engine's own copies between the device and host memory (the group counts its staging).
  mutable comm::HostDeviceCopies host_copies_;
};

}  // namespace zerotrain::engine
