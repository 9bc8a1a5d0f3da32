// Engine: the ZeRO training engine, stages 0-2 (zerotrain's deepspeed.initialize). The caller
// runs forward with its own code, then per micro-batch:
//   ZT_RETURN_IF_ERROR(engine->Backward(loss));  // scales by 1/GAS (x loss scale), reduces
//   ZT_RETURN_IF_ERROR(engine->Step());          // steps only at the accumulation boundary
// The engine moves the module's trainable parameters into a flat buffer (partition/FlatParams),
// reduces gradients in buckets (partition/GradientReducer), steps fp32 master weights with a
// ShardOptimizer and all-gathers updated parameters at stages 1 and 2. See docs/ENGINE.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "optim/loss_scaler.h"
#include "partition/flat_params.h"
#include "partition/gradient_reducer.h"
#include "trainer/engine_options.h"
#include "trainer/model_state.h"
#include "trainer/shard_optimizer.h"

namespace torch::nn {
class Module;
}
namespace zerotrain::checkpoint {
class CheckpointReader;
}

namespace zerotrain::trainer {

// Wall-clock seconds of the last optimizer step's micro-batches, summed over them. "forward" is
// the time between the engine's previous call and Backward, i.e. the caller's forward pass.
struct StepTimes {
  double forward = 0;
  double backward = 0;       // autograd, including reductions started by its hooks
  double backward_comm = 0;  // reductions finished (or started and finished) after autograd
  double step = 0;           // overflow check, clipping norm, optimizer
  double allgather = 0;      // stage 1/2 parameter all-gather
};

class Engine {
 public:
  // Collective: every rank of `group` must call it with an identical module and options. The
  // module must outlive the engine; its parameters become views of the engine's flat buffer
  // (cast to bf16/fp16 first when options.precision says so).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(torch::nn::Module& module,
                                                        const EngineOptions& options,
                                                        comm::ProcessGroup* group);
  ~Engine();

  absl::Status Backward(const at::Tensor& loss);
  absl::Status Step();

  bool at_accumulation_boundary() const;  // the next Step() will step the optimizer
  int64_t micro_steps() const { return micro_steps_; }
  int64_t optimizer_steps() const { return optimizer_steps_; }  // taken, not skipped
  int64_t skipped_steps() const { return skipped_steps_; }
  double loss_scale() const;
  double last_grad_norm() const { return last_grad_norm_; }  // when clipping is on
  const BatchSizes& batch() const { return batch_; }
  const StepTimes& last_step_times() const { return last_times_; }
  ModelStateBytes model_state_bytes() const;
  double formula_bytes() const;  // ZeroFormulaBytes for this configuration
  const partition::FlatParams& flat_params() const { return *flat_; }
  const at::Tensor& master() const { return master_; }
  void set_lr(double lr) {
    lr_ = lr;
    optimizer_->set_lr(lr);
  }
  double lr() const { return lr_; }  // the built-in optimizer's lr until set_lr is called

  // Training-state checkpoints (docs/CHECKPOINT.md), both collective. Save writes this rank's
  // shard file into <dir>/<tag>/, then rank 0 the manifest and <dir>/latest; tag "" means
  // "global_step<optimizer steps>". Call it after Step() at an accumulation boundary.
  absl::Status SaveCheckpoint(const std::string& dir, const std::string& tag = "",
                              const std::map<std::string, std::string>& client_state = {});
  // Restores master weights, optimizer states (re-sliced for this world size and stage),
  // parameters, loss scaler, step counters, lr and, when the world size matches, this rank's CPU
  // RNG; returns the client state saved with it. tag "" = the one <dir>/latest names.
  absl::StatusOr<std::map<std::string, std::string>> LoadCheckpoint(const std::string& dir,
                                                                    const std::string& tag = "");

 private:
  Engine() = default;
  // Exchanges fingerprints (and whether `local`, this rank's own setup check, failed) with every
  // rank; returns `local`'s error, or one naming what differs across ranks.
  absl::Status CheckRanksAgree(const std::vector<ParamSignature>& params,
                               const absl::Status& local);
  absl::Status BroadcastInitialState();
  absl::Status InitMaster();
  absl::StatusOr<bool> AgreeOverflow(const std::vector<partition::GradSegment>& grads);
  absl::StatusOr<double> GradScale(const std::vector<partition::GradSegment>& grads);
  absl::Status GatherParams();
  // The optimizer half of Step(), at the accumulation boundary; LibTorch may throw inside.
  absl::Status StepAtBoundary(double start);
  // Every rank learns whether every rank's `local` is OK; returns local's error or one naming the
  // ranks that failed (engine_checkpoint.cc).
  absl::Status AgreeAllOk(const absl::Status& local, const std::string& where);
  // The flat ranges [flat_begin, +numel) of real elements this rank's master holds, and where.
  std::vector<std::pair<int64_t, int64_t>> MasterRanges(std::vector<int64_t>* master_offsets) const;
  absl::Status CheckModelMatches(const checkpoint::CheckpointReader& reader) const;

  EngineOptions options_;
  BatchSizes batch_;
  comm::ProcessGroup* group_ = nullptr;
  torch::nn::Module* module_ = nullptr;
  std::unique_ptr<partition::FlatParams> flat_;
  std::unique_ptr<partition::GradientReducer> reducer_;
  std::unique_ptr<ShardOptimizer> optimizer_;
  std::unique_ptr<optim::LossScaler> scaler_;
  at::Tensor master_;  // fp32; aliases the flat buffer for fp32 stage 0
  bool master_aliases_params_ = false;

  bool backward_pending_ = false;
  int64_t micro_steps_ = 0;
  int64_t optimizer_steps_ = 0;
  int64_t skipped_steps_ = 0;
  double last_grad_norm_ = 0;
  double lr_ = 0;
  StepTimes times_, last_times_;
  double last_call_end_ = 0;  // seconds on a steady clock
};

}  // namespace zerotrain::trainer
