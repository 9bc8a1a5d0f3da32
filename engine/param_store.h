// ParamStore: what the ZeRO stages do differently with the module's trainable parameters, behind
// one interface the Engine calls in a fixed order. FlatStore (flat_store.h) holds stages 0-2's
// flat buffer; ShardedStore (sharded_store.h) holds stage 3's sharded parameters, gathered on use.
// Engine::Create chooses between them once, from the stage; nothing else in the engine asks
// which stage it runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "engine/engine_options.h"
#include "engine/model_state.h"
#include "optim/precision.h"
#include "partition/flat_params.h"
#include "partition/gradient_reducer.h"
#include "partition/sharded_params.h"

namespace zerotrain::engine {

// A run of this rank's fp32 master that mirrors part of one parameter.
struct MasterRun {
  int param;
  int64_t param_offset;
  int64_t numel;
  int64_t master_offset;
};

// A run of master elements and where the same elements sit in the model's copy (the flat buffer
// at stages 0-2, the shard at stage 3), the two coordinates of ModelRange.
struct ModelRun {
  int64_t master_offset;
  int64_t model_offset;
  int64_t numel;
};

// Elements [begin, begin + numel) of a rank's master, as its state store holds it (padded).
struct MasterSpan {
  int64_t begin;
  int64_t numel;
};

class ParamStore {
 public:
  virtual ~ParamStore() = default;

  // The layout and the parameter list, in the engine's order.
  virtual const partition::FlatParams& flat_params() const = 0;

  // --- The fp32 master this rank holds, and how it maps onto the model's copy.
  virtual int64_t master_numel() const = 0;
  virtual std::vector<ModelRun> ModelRuns() const = 0;
  // This rank's master runs of parameter i.
  virtual std::vector<MasterRun> MasterRunsOf(int param) const = 0;
  // This rank's master runs of every parameter, in parameter order.
  std::vector<MasterRun> MasterRuns() const;
  // Whether the model's copy is one tensor of the master's dtype laid out as the master, so that
  // (without optimizer offload) the master can be the parameters themselves.
  virtual bool ModelCanBeMaster(c10::ScalarType master_dtype) const = 0;
  // Elements [begin, begin + numel) of the model's copy in model coordinates: a view where it is
  // resident, a copy where offload_param keeps it on NVMe.
  virtual absl::StatusOr<at::Tensor> ModelRange(int64_t begin, int64_t numel) const = 0;
  // Which reduced gradients a rank keeps: what the reducer is built for.
  virtual partition::GradKeeping grad_keeping() const = 0;
  // Whether each rank holds a disjoint part of the gradients (the global norm needs a sum).
  bool grads_sharded() const { return grad_keeping() != partition::GradKeeping::kWhole; }

  // --- A micro step. Forward and backward open a window in which parameters are readable.
  virtual void BeginForward() {}
  virtual void EndForward() {}
  virtual void BeginBackward() {}
  // failed: autograd threw; release what backward gathered, report nothing.
  virtual absl::Status EndBackward(bool failed) { return absl::OkStatus(); }

  // --- The optimizer step. Where the optimizer writes segment g's low-precision parameters when
  // it is a buffer the store keeps in place (undefined: ForEachStepPiece hands it out instead).
  virtual at::Tensor ParamsOut(const partition::GradSegment& g) const = 0;
  // Runs fn over [begin, end) of the master in pieces whose low-precision copy is in memory
  // together; `out` is that copy of [lo, hi) when the store hands it out (written back after fn),
  // else undefined. aliased: the master is the parameters, nothing to write.
  using PieceFn = std::function<absl::Status(int64_t lo, int64_t hi, const at::Tensor& out)>;
  virtual absl::Status ForEachStepPiece(int64_t begin, int64_t end, bool aliased,
                                        const PieceFn& fn) = 0;
  // After the master changed (a step, a load): every rank's parameters follow. Collective; a
  // store whose ranks agree on the outcome prefixes the others' error with `where`.
  virtual absl::Status PublishUpdate(const std::string& where) = 0;
  // The host's checks of collectives PublishUpdate only ordered the device stream after (their
  // errors and timeouts); the engine calls it before it next reads results on the host.
  virtual absl::Status WaitStreamOrdered() const { return absl::OkStatus(); }
  // Rounds master elements [begin, begin + piece.numel()) (fp32, on any device) into the
  // model's low-precision copy: a checkpoint load hands the master over a sub-group at a time.
  virtual absl::Status ParamsFromMaster(const at::Tensor& piece, int64_t begin) = 0;

  // --- Parameter access outside forward (GatheredParameters), shapes and statistics.
  virtual std::vector<int64_t> FullShape(int param) const = 0;
  virtual partition::GatherStats gather_stats() const { return {}; }
  virtual void ResetGatherPeak() {}
  virtual absl::Status Pin(const std::vector<int>& params) { return absl::OkStatus(); }
  virtual void Unpin(const std::vector<int>& params) {}
  // After parameter i's full values were overwritten: make the store's copy follow.
  virtual absl::Status WriteBack(int param) { return absl::OkStatus(); }

  // The parameter bytes this rank keeps (params, offloaded_host, offloaded_nvme).
  virtual void AddParamBytes(ModelStateBytes* bytes) const = 0;

  // --- How a checkpoint holds this store's master: the layout's world size, which ranks save
  // state, and which spans of the master (of master_numel elements) the file's arrays hold, in
  // order, end to end.
  virtual int checkpoint_world_size() const = 0;
  virtual bool SavesState(int rank) const = 0;
  virtual std::vector<MasterSpan> CheckpointSpans(int64_t master_numel) const = 0;
};

// What a store is made from (each store's Create is collective: it partitions the parameters
// and starts every rank from rank 0's values; a failure on any rank is every rank's error). The
// parameters are in the engine's order (reverse registration); segment_starts cut them into stage
// 3's per-submodule segments.
struct ParamStoreInputs {
  const EngineOptions* options = nullptr;
  comm::ProcessGroup* group = nullptr;
  partition::NamedTensors params;
  std::vector<int> segment_starts;
  partition::ParamShardOptions shard;  // where stage 3 keeps its shard (offload_param)
};

// The runs of parameter i that `rank` owns in a sharded layout (stages 1-3): where in the
// parameter, how many, and where in that rank's master.
std::vector<MasterRun> OwnedRuns(const partition::ShardLayout& layout, int param, int rank);

// Rounds the master's elements in `piece` (elements [begin, begin + piece.numel()) of the master)
// into out_of(run), a low-precision (or fp32) tensor of run.numel elements on any device, for
// each run cut to the piece: the fp32 -> bf16/fp16 rounding the optimizer kernels use for their
// params_out.
void ConvertRuns(const at::Tensor& piece, int64_t begin, const std::vector<MasterRun>& runs,
                 const std::function<at::Tensor(const MasterRun&)>& out_of);

// Makes rank 0's values of t every rank's, in place: through a contiguous copy where t is not
// contiguous, and through bytes where it is bool, which Gloo does not carry. Collective.
absl::Status BroadcastFromRankZero(comm::ProcessGroup* group, const at::Tensor& t);

// Every rank learns whether every rank's `local` is OK; returns local's error or one naming the
// ranks that failed.
absl::Status AgreeAllOk(comm::ProcessGroup* group, const absl::Status& local,
                        const std::string& where);

}  // namespace zerotrain::engine
