// MuonGradients: the first half of DeepSpeed's Muon under ZeRO. At the accumulation boundary,
// before the norm is taken, each Muon parameter's reduced gradient becomes its orthogonalised
// update: the momentum (kept per element, sharded like the master, in the optimizer's first state
// array) follows the gradient, the Nesterov blend of the two is assembled whole on the ranks that
// hold a piece of the matrix (Newton-Schulz needs the whole matrix), orthogonalised
// (optim/newton_schulz.h), and each rank keeps its own pieces, written over its gradients. The
// norm, clipping and the step then see updates, as DeepSpeed's ZeRO 1-3 do; the optimizer
// (MakeMuonShardOptimizer) applies them with Muon's lr and decoupled weight decay. A matrix whose
// gradient is not finite keeps its momentum and its gradient (DeepSpeed's muon_update does the
// same), so the overflow check sees it and the step is skipped.
//
// A matrix one rank holds whole is done there alone. Matrices split across ranks are assembled by
// one sum over ranks of their pieces (zeros elsewhere, so the sum is the matrix bit for bit), a
// batch of at most batch_numel elements at a time, so a step holds a few such buffers on top of
// the model, never all matrices whole (ZeRO 3 splits every matrix); each is orthogonalised by one
// rank, in turn, and a second sum hands the updates to the others.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "engine/engine_options.h"
#include "engine/master_state.h"
#include "engine/param_store.h"
#include "optim/newton_schulz.h"
#include "partition/gradient_reducer.h"

namespace zerotrain::engine {

// A trainable parameter Muon steps, as a rows x cols matrix (a conv filter's trailing dimensions
// flattened, as DeepSpeed views it).
struct MuonMatrix {
  int param = 0;  // the engine's (laid-out) parameter index
  int64_t rows = 0;
  int64_t cols = 0;
};

// The parameters `use_muon` picks, as matrices: names[i] and shapes[i] (whole) are the engine's
// parameter i. A parameter of fewer than two dimensions cannot be one (DeepSpeed asserts so too).
absl::StatusOr<std::vector<MuonMatrix>> PickMuonMatrices(
    const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
    const UseMuonFn& use_muon);

struct MuonGradientOptions {
  double momentum = 0.95;  // DeepSpeed's beta
  optim::NsMethod ns_method = optim::NsMethod::kGram;
  int64_t batch_numel = 500000000;  // elements assembled at once (at least one matrix)
};

class MuonGradients {
 public:
  // `params` and `master` must outlive the result. Collective: the ranks learn which matrices
  // more than one of them holds.
  static absl::StatusOr<std::unique_ptr<MuonGradients>> Create(const MuonGradientOptions& options,
                                                               std::vector<MuonMatrix> matrices,
                                                               ParamStore* params,
                                                               MasterState* master,
                                                               comm::ProcessGroup* group);

  // Collective (two all-reduces per batch of split matrices). `grads` are the reducer's owned
  // gradients (defined tensors); the momentum follows them divided by `in_divisor`, and the
  // updates written over them are multiplied by `out_scale`, so that the step's division by its
  // grad scale leaves what DeepSpeed applies. ZeRO 1-3 (DeepSpeed's non-offloaded paths): the
  // gradients as reduced (in 1) and the loss scale out, before the norm. Stage 0: the clipped
  // gradients (in and out the step's grad scale), after the norm.
  absl::Status Apply(const std::vector<partition::GradSegment>& grads, double in_divisor,
                     double out_scale);

 private:
  // Where this rank holds elements of a matrix: a run of the master.
  struct Piece {
    int matrix;
    int64_t master_offset;
    int64_t numel;
    int64_t param_offset;
  };
  // Matrices assembled together, and where each begins in the batch's buffer.
  struct Batch {
    std::vector<int> matrices;
    std::vector<int64_t> offsets;  // by matrix index; -1 outside the batch
    int64_t numel = 0;
    bool shared = false;  // summed over ranks
  };
  // Calls fn(piece, momentum, grads, pos) for every overlap of a piece of `batch`, a sub-group of
  // the state and a gradient segment: the overlap's momentum and gradients, and where it begins
  // in the batch's buffer. Visits only the state the batch's pieces span, and writes it back only
  // for kReadWrite (on NVMe each visited sub-group is a swap in, and out unless kRead).
  using OverlapFn = std::function<void(const Piece&, const at::Tensor& momentum,
                                       const at::Tensor& grads, int64_t pos)>;
  absl::Status ForEachOverlap(const Batch& batch, const std::vector<partition::GradSegment>& grads,
                              offload::Access access, const OverlapFn& fn);
  absl::Status ApplyBatch(const Batch& batch, const std::vector<partition::GradSegment>& grads,
                          double in_divisor, double out_scale);

  MuonGradientOptions options_;
  std::vector<MuonMatrix> matrices_;
  std::vector<Piece> pieces_;  // in master order
  std::vector<Batch> batches_;
  std::vector<bool> computes_;  // matrices this rank orthogonalises
  ParamStore* params_ = nullptr;
  MasterState* master_ = nullptr;
  comm::ProcessGroup* group_ = nullptr;
};

}  // namespace zerotrain::engine
