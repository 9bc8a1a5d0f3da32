// FlatStore: ZeRO stages 0, 1 and 2. The trainable parameters are views of one flat buffer per
// dtype group (partition/FlatParams), whole on every rank. Stage 0 keeps the whole fp32 master on
// every rank; stages 1 and 2 keep each rank's slice of every bucket and all-gather the updated
// slices after each step (stage 2 also shards the gradients, which the reducer does).
#pragma once

#include <memory>
#include <vector>

#include "engine/param_store.h"

namespace zerotrain::engine {

class FlatStore : public ParamStore {
 public:
  // Collective: lays the parameters out (agreed across ranks), then broadcasts rank 0's values.
  static absl::StatusOr<std::unique_ptr<ParamStore>> Create(const ParamStoreInputs& in);

  const partition::FlatParams& flat_params() const override { return flat_; }

  int64_t master_numel() const override;
  std::vector<ModelRun> ModelRuns() const override;
  std::vector<MasterRun> MasterRunsOf(int param) const override;
  bool ModelCanBeMaster() const override;
  absl::StatusOr<at::Tensor> ModelRange(int64_t begin, int64_t numel) const override;
  bool grads_sharded() const override { return stage_ > 0; }

  at::Tensor ParamsOut(const partition::GradSegment& g) const override;
  absl::Status ForEachStepPiece(int64_t begin, int64_t end, bool aliased,
                                const PieceFn& fn) override;
  absl::Status PublishUpdate(const std::string& where) override;
  absl::Status WaitStreamOrdered() const override;
  absl::Status ParamsFromMaster(const at::Tensor& piece, int64_t begin) override;

  std::vector<int64_t> FullShape(int param) const override;
  void AddParamBytes(ModelStateBytes* bytes) const override;

  int checkpoint_world_size() const override { return stage_ == 0 ? 1 : group_->world_size(); }
  bool SavesState(int rank) const override { return stage_ > 0 || rank == 0; }
  std::vector<MasterSpan> CheckpointSpans(int64_t master_numel) const override;

 private:
  FlatStore(partition::FlatParams flat, comm::ProcessGroup* group, int stage,
            int64_t allgather_bucket_size)
      : flat_(std::move(flat)),
        group_(group),
        stage_(stage),
        allgather_bucket_size_(allgather_bucket_size) {}
  absl::Status BroadcastFlat();
  // Stages 1-2: every rank's updated slices into every rank's flat buffer.
  absl::Status GatherParams();
  // Orders the device stream after `works` (the host checks them in WaitStreamOrdered); clears it.
  absl::Status WaitOnStream(std::vector<comm::Work>& works);

  partition::FlatParams flat_;
  comm::ProcessGroup* group_;
  int stage_;
  int64_t allgather_bucket_size_;
  mutable std::vector<comm::Work> stream_ordered_;
};

}  // namespace zerotrain::engine
