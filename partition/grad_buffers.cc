// FlatGrads and ShardGrads, the reducer's two gradient memories (grad_buffers.h).
#include "partition/grad_buffers.h"

#include <ATen/ops/empty.h>

#include <algorithm>

#include "offload/memory_roles.h"

namespace zerotrain::partition {

at::Tensor ScratchBuffers::Take(int64_t numel, at::ScalarType dtype) {
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].numel() == numel && spare_[i].scalar_type() == dtype) {
      at::Tensor t = std::move(spare_[i]);
      spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
      return t;
    }
  }
  offload::MemoryRoleScope role(offload::MemoryRole::kGradientBuckets);
  return at::empty({numel}, options_.dtype(dtype));
}

namespace {

// Every bucket's owned slice, in bucket order.
std::vector<GradSegment> OwnedSlices(const GradBuffers& grads, const FlatParams& params) {
  std::vector<GradSegment> out;
  for (size_t k = 0; k < params.layout().buckets().size(); ++k) {
    out.push_back(grads.OwnedOf(static_cast<int>(k)));
  }
  return out;
}

// ZeRO 0 and 1: hooks add into a full flat buffer; the reduction runs in place on it at the
// accumulation boundary. Stage 1 then keeps only the owned slices valid, stage 0 everything.
class FlatGrads : public GradBuffers {
 public:
  FlatGrads(const FlatParams* params, int rank, bool whole)
      : params_(params), rank_(rank), whole_(whole) {
    offload::MemoryRoleScope role(offload::MemoryRole::kGradients);
    flat_ = params->NewFlat();
  }
  bool reduces_every_backward() const override { return false; }
  bool keeps_whole_buckets() const override { return whole_; }
  bool holds_owned_slices() const override { return !whole_; }

  void Add(int param, const at::Tensor& grad) override {
    params_->ViewOf(flat_, param).view({-1}).add_(grad);
  }
  at::Tensor Input(int bucket, const std::vector<bool>&) override {
    const LayoutBucket& b = params_->layout().buckets()[bucket];
    return flat_.Range(b.begin, b.numel);
  }
  absl::Status Keep(int bucket, const at::Tensor& reduced) override {
    at::Tensor owned = OwnedOf(bucket).grads;
    if (owned.data_ptr() != reduced.data_ptr()) owned.copy_(reduced);  // reduced in place or not
    return absl::OkStatus();
  }

  std::vector<GradSegment> Owned() const override {
    std::vector<GradSegment> out;
    if (whole_) {
      for (size_t g = 0; g < flat_.parts().size(); ++g) {
        const int64_t begin = flat_.begin(static_cast<int>(g));
        const at::Tensor& part = flat_.parts()[g];
        out.push_back(GradSegment{begin, begin, part, part.numel()});
      }
      return out;
    }
    return OwnedSlices(*this, *params_);
  }
  GradSegment OwnedOf(int bucket) const override {
    const ShardLayout& layout = params_->layout();
    const LayoutBucket& b = layout.buckets()[bucket];
    const int64_t begin = layout.OwnedBegin(bucket, rank_);
    return GradSegment{b.shard_offset, begin, flat_.Range(begin, b.slice), b.slice};
  }
  void Zero() override { flat_.Zero(); }
  int64_t nbytes() const override { return flat_.nbytes(); }

 private:
  const FlatParams* params_;
  int rank_;
  bool whole_;
  GroupedBuffer flat_;
};

// ZeRO 2 and 3: each bucket's gradients are staged, reduced and added into a shard of
// shard_numel() elements every backward, then the staging goes; with a sink the reduced slices
// go to it instead and nothing is kept here.
class ShardGrads : public GradBuffers {
 public:
  ShardGrads(const FlatParams* params, int rank, GradShardSink* sink, ScratchBuffers* scratch)
      : params_(params), rank_(rank), sink_(sink), scratch_(scratch) {
    const ShardLayout& layout = params->layout();
    for (const LayoutBucket& b : layout.buckets()) largest_ = std::max(largest_, b.numel);
    for (int i = 0; i < params->num_params(); ++i) pieces_.push_back(layout.PiecesOf(i));
    staging_.resize(layout.buckets().size());
    offload::MemoryRoleScope role(offload::MemoryRole::kGradients);
    if (sink_ == nullptr) shard_ = params->NewShard();
  }
  bool reduces_every_backward() const override { return true; }
  bool keeps_whole_buckets() const override { return false; }
  bool holds_owned_slices() const override { return sink_ == nullptr; }
  GradShardSink* sink() const override { return sink_; }

  void BeginBackward() override {
    for (at::Tensor& t : staging_) t = at::Tensor();
  }
  absl::Status BeginPass() override {
    return sink_ != nullptr ? sink_->Begin(accumulate_) : absl::OkStatus();
  }
  absl::Status FinishPass(absl::Status pass) override {
    if (sink_ == nullptr) return pass;
    if (pass.ok()) pass = sink_->Finish();
    // A pass that failed part-way leaves nothing to sum onto (the sink's sub-groups past the
    // failure hold older gradients): the next pass replaces them, starting the accumulation over.
    accumulate_ = pass.ok();
    return pass;
  }

  void Add(int param, const at::Tensor& grad) override {
    const auto& buckets = params_->layout().buckets();
    for (const ParamPiece& piece : pieces_[param]) {
      Staging(piece.bucket)
          .narrow(0, piece.flat_begin - buckets[piece.bucket].begin, piece.numel)
          .copy_(grad.narrow(0, piece.param_offset, piece.numel));
    }
  }
  at::Tensor Input(int bucket, const std::vector<bool>& arrived) override {
    ZeroUncovered(bucket, arrived);
    return Staging(bucket);
  }
  absl::Status Keep(int bucket, const at::Tensor& reduced) override {
    const LayoutBucket& b = params_->layout().buckets()[bucket];
    absl::Status s = sink_ != nullptr ? sink_->Add(b.shard_offset, reduced) : absl::OkStatus();
    if (sink_ == nullptr) shard_.Range(b.shard_offset, b.slice).add_(reduced);
    scratch_->Return(std::move(staging_[bucket]));
    staging_[bucket] = at::Tensor();
    return s;
  }

  std::vector<GradSegment> Owned() const override { return OwnedSlices(*this, *params_); }
  GradSegment OwnedOf(int bucket) const override {
    const ShardLayout& layout = params_->layout();
    const LayoutBucket& b = layout.buckets()[bucket];
    GradSegment s{b.shard_offset, layout.OwnedBegin(bucket, rank_), at::Tensor(), b.slice};
    if (sink_ == nullptr) s.grads = shard_.Range(b.shard_offset, b.slice);
    return s;
  }
  void Zero() override {
    shard_.Zero();
    accumulate_ = false;
  }
  int64_t nbytes() const override { return shard_.nbytes(); }

 private:
  // The bucket's staging buffer (a view of exactly its elements), taken on first use. Not
  // zeroed: every element is either copied by a hook or zeroed by ZeroUncovered. Every bucket's
  // buffer has the largest bucket's size, so any finished one fits.
  at::Tensor Staging(int bucket) {
    at::Tensor& t = staging_[bucket];
    if (!t.defined()) {
      t = scratch_->Take(largest_, params_->groups()[params_->GroupOfBucket(bucket)].dtype);
    }
    return t.narrow(0, 0, params_->layout().buckets()[bucket].numel);
  }
  void ZeroUncovered(int bucket, const std::vector<bool>& arrived);

  const FlatParams* params_;
  int rank_;
  GradShardSink* sink_;
  ScratchBuffers* scratch_;
  std::vector<std::vector<ParamPiece>> pieces_;  // per parameter
  int64_t largest_ = 0;
  bool accumulate_ = false;  // a reduction since construction or Zero()
  GroupedBuffer shard_;
  std::vector<at::Tensor> staging_;  // per bucket, only while it is being reduced
};

void ShardGrads::ZeroUncovered(int bucket, const std::vector<bool>& arrived) {
  const ShardLayout& layout = params_->layout();
  const LayoutBucket& b = layout.buckets()[bucket];
  at::Tensor t = Staging(bucket);
  const int64_t end = b.begin + b.numel;
  // Parameters fill a bucket from its start; padding follows the last one (at the end of the
  // buffer, or of a segment: shard_layout.h).
  int64_t real_end = b.begin;
  for (int p = b.first_param; p < b.end_param; ++p) {
    real_end = std::max(real_end, layout.param_offset(p) + layout.param_numel(p));
  }
  real_end = std::min(real_end, end);
  if (real_end < end) t.narrow(0, real_end - b.begin, end - real_end).zero_();
  for (int p = b.first_param; p < b.end_param; ++p) {
    if (arrived[p]) continue;
    for (const ParamPiece& piece : pieces_[p]) {
      if (piece.bucket == bucket) t.narrow(0, piece.flat_begin - b.begin, piece.numel).zero_();
    }
  }
}

}  // namespace

std::unique_ptr<GradBuffers> GradBuffers::Create(const FlatParams* params, int rank,
                                                 GradKeeping keeping, GradShardSink* sink,
                                                 ScratchBuffers* scratch) {
  if (keeping == GradKeeping::kShard) {
    return std::make_unique<ShardGrads>(params, rank, sink, scratch);
  }
  return std::make_unique<FlatGrads>(params, rank, keeping == GradKeeping::kWhole);
}

}  // namespace zerotrain::partition
