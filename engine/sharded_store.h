// ShardedStore: ZeRO stage 3. Each rank keeps only its shard of every parameter
// (partition/ShardedParams: with the model, in host memory or on NVMe as offload_param says);
// parameters are gathered per submodule while forward, backward or GatheredParameters reads them
// and released after. The fp32 master is laid out as the shard, so a step writes the shard piece
// by piece, and the gathered copies are refreshed after it.
#pragma once

#include <memory>
#include <vector>

#include "engine/param_store.h"

namespace zerotrain::engine {

class ShardedStore : public ParamStore {
 public:
  // Collective: broadcasts rank 0's values (those ShardedInit did not already partition), then
  // shards them (agreed across ranks: a shard part written to NVMe can fail on one rank).
  static absl::StatusOr<std::unique_ptr<ParamStore>> Create(const ParamStoreInputs& in);

  const partition::FlatParams& flat_params() const override { return sharded_->flat_params(); }

  int64_t master_numel() const override { return sharded_->shard().numel(); }
  std::vector<ModelRun> ModelRuns() const override { return {{0, 0, master_numel()}}; }
  std::vector<MasterRun> MasterRunsOf(int param) const override;
  bool ModelCanBeMaster(c10::ScalarType master_dtype) const override;
  absl::StatusOr<at::Tensor> ModelRange(int64_t begin, int64_t numel) const override;
  partition::GradKeeping grad_keeping() const override { return partition::GradKeeping::kShard; }

  void BeginForward() override;
  void EndForward() override { sharded_->CloseWindow(); }
  void BeginBackward() override { sharded_->OpenWindow(); }
  absl::Status EndBackward(bool failed) override;

  at::Tensor ParamsOut(const partition::GradSegment& g) const override { return at::Tensor(); }
  absl::Status ForEachStepPiece(int64_t begin, int64_t end, bool aliased,
                                const PieceFn& fn) override;
  absl::Status PublishUpdate(const std::string& where) override;
  absl::Status ParamsFromMaster(const at::Tensor& piece, int64_t begin) override;

  std::vector<int64_t> FullShape(int param) const override { return sharded_->FullShape(param); }
  partition::GatherStats gather_stats() const override { return sharded_->stats(); }
  void ResetGatherPeak() override { sharded_->ResetPeak(); }
  absl::Status Pin(const std::vector<int>& params) override;
  void Unpin(const std::vector<int>& params) override { sharded_->Unpin(params); }
  absl::Status WriteBack(int param) override { return sharded_->WriteBack(param); }

  void AddParamBytes(ModelStateBytes* bytes) const override;

  int checkpoint_world_size() const override { return group_->world_size(); }
  bool SavesState(int rank) const override { return true; }
  std::vector<MasterSpan> CheckpointSpans(int64_t master_numel) const override {
    return {{0, master_numel}};
  }

 private:
  ShardedStore(std::unique_ptr<partition::ShardedParams> sharded, comm::ProcessGroup* group)
      : sharded_(std::move(sharded)), group_(group) {}
  // One step piece: the shard's [lo, hi) read (a view, or a copy from NVMe), stepped, written.
  absl::Status StepPiece(int64_t lo, int64_t hi, bool aliased, const PieceFn& fn);

  std::unique_ptr<partition::ShardedParams> sharded_;
  comm::ProcessGroup* group_;
};

}  // namespace zerotrain::engine
