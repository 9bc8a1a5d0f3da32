// MasterState: this rank's master weights and optimizer states, one object: the SubGroupStore
// that holds them where offload_optimizer puts them (the model's device, host memory or NVMe), in
// fp32 or, under bf16 master weights / optimizer states, in bf16; the ShardOptimizer that steps
// them a sub-group at a time; and the StepStaging that brings the gradients to the state's device
// and the new parameters back. The Engine keeps the order of a step; this keeps the state and how
// it is reached. Whatever the arrays are stored as, everyone reads and writes them as fp32
// (Visit): a bf16 array is widened into a small fp32 buffer a piece at a time and rounded back
// to nearest even when the piece is done, which is DeepSpeed's arithmetic for bf16 master weights
// (fp32 math, bf16 storage) at a few MiB of buffers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "engine/device_runtime.h"
#include "engine/engine_options.h"
#include "engine/model_state.h"
#include "engine/param_store.h"
#include "engine/shard_optimizer.h"
#include "engine/step_staging.h"
#include "offload/pinned_host_pool.h"
#include "offload/sub_group_store.h"
#include "offload/swap_space.h"
#include "offload/transfer_stream.h"

namespace zerotrain::engine {

struct MasterStateInputs {
  const EngineOptions* options = nullptr;
  comm::ProcessGroup* group = nullptr;
  ParamStore* params = nullptr;  // the model's copy: its runs fill the master, its pieces step
  offload::PinnedHostPool* pool = nullptr;
  offload::TransferStream* transfer = nullptr;
  offload::SwapSpace* swap = nullptr;  // offload_optimizer nvme
  bool grads_in_store = false;         // the reducer's gradients go to the store (its sink)
  comm::HostDeviceCopies* copies = nullptr;
  const DeviceRuntime* device = nullptr;  // the engine's (the model's device)
  // Each parameter's group (engine order) for an optimizer with param_groups() > 1; empty: all 0.
  std::vector<int> param_groups;
};

// A piece of the state as the optimizer sees it: every array as fp32, whatever it is stored as.
struct MasterView {
  int64_t begin = 0;  // first element (of every array) of the piece
  int64_t numel = 0;
  std::vector<float*> arrays;    // arrays[a][i] is element begin + i of array a
  const float* grads = nullptr;  // VisitWithGrads: the store's gradients for the piece
};
using MasterVisitFn = std::function<absl::Status(const MasterView&)>;

class MasterState {
 public:
  // Builds the store and fills the master from the model (every element written: padding as
  // zeros, the states as `optimizer` says). Not collective.
  static absl::StatusOr<std::unique_ptr<MasterState>> Create(
      const MasterStateInputs& in, std::unique_ptr<ShardOptimizer> optimizer);

  int64_t numel() const { return numel_; }
  // The model's copy is one fp32 tensor laid out as the master, and nothing is offloaded: the
  // master is the model's own parameters.
  bool aliases_params() const { return aliases_params_; }
  ShardOptimizer& optimizer() const { return *optimizer_; }
  StepStaging& staging() const { return *staging_; }
  offload::SubGroupStore& store() const { return *store_; }
  // fp32 memory of a view as a tensor on the device the state lives on.
  at::Tensor Array(float* data, int64_t numel) const;
  // The master and the optimizer's state arrays: 1 + state_names().size().
  int num_arrays() const { return static_cast<int>(dtypes_.size()); }

  // The store's Visit of [begin, end) as fp32 pieces: a sub-group whole when every array is fp32
  // and whole, else pieces of at most kPieceNumel elements (those overlapping [begin, end)) in
  // which a bf16 array is widened and an array kept for one group's elements only (compact, see
  // ShardOptimizer::state_array_groups) reads as zeros elsewhere; kWrite reads nothing first,
  // kRead writes nothing back (and what falls outside a compact array's elements never is). One
  // visit at a time, as the store's rule is: the pieces share this object's fp32 buffers. An
  // error from fn leaves that piece's bf16 and compact arrays as they were (what fn already
  // wrote into fp32 arrays in place stays, as in a store visit of host memory); the step that
  // failed is not retried, the engine is broken from then on.
  // Compact arrays come from LibTorch's allocator on the state's device (host memory under
  // offload, counted in offloaded_host), not from the pinned pool, and stay there under nvme.
  absl::Status Visit(int64_t begin, int64_t end, offload::Access access,
                     const MasterVisitFn& fn) const;
  absl::Status VisitAll(offload::Access access, const MasterVisitFn& fn) const {
    return Visit(0, numel_, access, fn);
  }
  static constexpr int64_t kPieceNumel = int64_t{1} << 18;

  // A host copy of the master weights (read from NVMe when offloaded there).
  absl::StatusOr<at::Tensor> Copy() const;
  // `values` (a parameter's full values, flat, fp32) into this rank's `runs` of the master.
  absl::Status FromValues(const std::vector<MasterRun>& runs, const at::Tensor& values);
  // Every piece (kReadWrite), with its gradients where the store keeps them.
  absl::Status VisitWithGrads(const MasterVisitFn& fn);
  // The optimizer's step `step` over every sub-group (master_state_step.cc); collective when the
  // optimizer asks for tensor sums.
  absl::Status Step(int64_t step, double grad_scale, const std::vector<ShardSegment>& segments);
  // The master's and the states' bytes, where they live.
  void AddBytes(ModelStateBytes* b) const;

 private:
  MasterState() = default;
  // The arrays on the model's device, which the store only cuts into sub-groups (no offload).
  absl::Status AllocateResident(const std::vector<float>& initial,
                                offload::SubGroupStoreOptions* so);
  absl::Status Fill(const std::vector<float>& initial);
  // fn over the pieces of one store view (see Visit; master_state_visit.cc).
  absl::Status VisitPieces(const offload::SubGroupView& v, int64_t begin, int64_t end,
                           offload::Access access, const MasterVisitFn& fn) const;
  // Elements [begin, begin + n) of store array a in view v, in the array's own dtype.
  at::Tensor Stored(int a, const offload::SubGroupView& v, int64_t begin, int64_t n) const;
  // Array a's values for elements [begin, begin + n) as fp32 in `wide` (read) or back (write).
  void Widen(int a, const offload::SubGroupView& v, int64_t begin, int64_t n,
             const at::Tensor& wide) const;
  void Narrow(int a, const offload::SubGroupView& v, int64_t begin, int64_t n,
              const at::Tensor& wide) const;
  // The arrays kept for one group's elements only, their runs and memory (Create).
  absl::Status MakeCompact(const MasterStateInputs& in, const std::vector<float>& initial);

  // Where a compact array keeps a run of its group's elements.
  struct CompactRun {
    int64_t master_offset = 0;
    int64_t numel = 0;
    int64_t compact_offset = 0;
  };

  const EngineOptions* options_ = nullptr;
  comm::ProcessGroup* group_ = nullptr;
  ParamStore* params_ = nullptr;
  bool grads_in_store_ = false;
  std::vector<int> param_groups_;
  comm::HostDeviceCopies* copies_ = nullptr;  // the engine's count of host<->device bytes
  int64_t numel_ = 0;
  bool aliases_params_ = false;
  // Where the state lives: the model's device, or the host under offload_optimizer.
  const DeviceRuntime* runtime_ = &DeviceRuntime::Host();
  std::unique_ptr<ShardOptimizer> optimizer_;
  std::unique_ptr<StepStaging> staging_;
  std::vector<at::Tensor> resident_;     // without offload: the arrays store_ cuts up
  std::vector<c10::ScalarType> dtypes_;  // per array
  std::vector<at::Tensor> widened_;      // per bf16 or compact array: its piece in fp32
  std::vector<int> store_index_;         // per array: its index in store_, or -1 (compact)
  std::vector<at::Tensor> compact_;      // per compact array: its group's elements, in order
  std::vector<std::vector<CompactRun>> compact_runs_;  // per compact array, by master_offset
  // The master weights, then the optimizer's state arrays, of numel_ elements each.
  std::unique_ptr<offload::SubGroupStore> store_;
};

}  // namespace zerotrain::engine
