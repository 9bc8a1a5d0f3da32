// FlatStore: ZeRO stages 0, 1 and 2. The trainable parameters are views of one flat buffer per
// dtype group (partition/FlatParams), whole on every rank. The master follows the gradients the
// rank keeps (chosen once, at Create): with whole gradients (stage 0) every rank keeps and steps
// the whole fp32 master; with owned slices or a gradient shard (stages 1 and 2) each rank keeps
// its slice of every bucket and all-gathers the updated slices after each step.
#pragma once

#include <memory>
#include <vector>

#include "engine/param_store.h"

namespace zerotrain::engine {

class FlatStore : public ParamStore {
 public:
  // Collective: lays the parameters out (agreed across ranks), then broadcasts rank 0's values.
  static absl::StatusOr<std::unique_ptr<ParamStore>> Create(const ParamStoreInputs& in,
                                                            partition::GradKeeping keeping);

  const partition::FlatParams& flat_params() const override { return flat_; }

  int64_t master_numel() const override;
  std::vector<ModelRun> ModelRuns() const override;
  std::vector<MasterRun> MasterRunsOf(int param) const override;
  bool ModelCanBeMaster(c10::ScalarType master_dtype) const override;
  absl::StatusOr<at::Tensor> ModelRange(int64_t begin, int64_t numel) const override;
  partition::GradKeeping grad_keeping() const override { return keeping_; }

  at::Tensor ParamsOut(const partition::GradSegment& g) const override;
  absl::Status ForEachStepPiece(int64_t begin, int64_t end, bool aliased,
                                const PieceFn& fn) override;
  absl::Status PublishUpdate(const std::string& where) override;
  absl::Status WaitStreamOrdered() const override;
  absl::Status ParamsFromMaster(const at::Tensor& piece, int64_t begin) override;

  std::vector<int64_t> FullShape(int param) const override;
  void AddParamBytes(ModelStateBytes* bytes) const override;

  int checkpoint_world_size() const override { return whole_ ? 1 : group_->world_size(); }
  bool SavesState(int rank) const override { return !whole_ || rank == 0; }
  std::vector<MasterSpan> CheckpointSpans(int64_t master_numel) const override;

 private:
  FlatStore(partition::FlatParams flat, comm::ProcessGroup* group, partition::GradKeeping keeping,
            int64_t allgather_bucket_size)
      : flat_(std::move(flat)),
        group_(group),
        keeping_(keeping),
        whole_(keeping == partition::GradKeeping::kWhole),
        allgather_bucket_size_(allgather_bucket_size) {}
  absl::Status BroadcastFlat();
  // Sharded master: every rank's updated slices into every rank's flat buffer.
  absl::Status GatherParams();
  // Orders the device stream after `works` (the host checks them in WaitStreamOrdered); clears it.
  absl::Status WaitOnStream(std::vector<comm::Work>& works);

  partition::FlatParams flat_;
  comm::ProcessGroup* group_;
  partition::GradKeeping keeping_;
  bool whole_;  // the whole master on every rank, laid out as the flat buffer
  int64_t allgather_bucket_size_;
  mutable std::vector<comm::Work> stream_ordered_;
};

}  // namespace zerotrain::engine
