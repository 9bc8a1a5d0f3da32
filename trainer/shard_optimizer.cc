// optim/'s fused Adam(W) and SGD behind the ShardOptimizer interface.
#include "trainer/shard_optimizer.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace zerotrain::trainer {
namespace {

absl::Status CheckSegment(const ShardSegment& s, int64_t shard_numel, const char* who) {
  if (s.offset < 0 || s.size < 0 || s.offset + s.size > shard_numel) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": segment [", s.offset, ", ",
                                                   s.offset + s.size, ") outside shard of ",
                                                   shard_numel));
  }
  return absl::OkStatus();
}

class AdamShardOptimizer : public ShardOptimizer {
 public:
  explicit AdamShardOptimizer(const optim::AdamOptions& options) : options_(options) {}
  std::string name() const override { return options_.adamw ? "AdamW" : "Adam"; }

  absl::Status Init(int64_t shard_numel) override {
    exp_avg_.assign(shard_numel, 0.0f);
    exp_avg_sq_.assign(shard_numel, 0.0f);
    if (options_.amsgrad) max_exp_avg_sq_.assign(shard_numel, 0.0f);
    return absl::OkStatus();
  }

  absl::Status Step(int64_t step, double grad_scale, float* master,
                    absl::Span<const ShardSegment> segments) override {
    std::vector<optim::AdamShard> shards;
    for (const ShardSegment& s : segments) {
      absl::Status ok = CheckSegment(s, static_cast<int64_t>(exp_avg_.size()), "Adam");
      if (!ok.ok()) return ok;
      optim::AdamShard a;
      a.size = s.size;
      a.params = master + s.offset;
      a.grads = s.grads;
      a.grad_dtype = s.grad_dtype;
      a.exp_avg = exp_avg_.data() + s.offset;
      a.exp_avg_sq = exp_avg_sq_.data() + s.offset;
      if (options_.amsgrad) a.max_exp_avg_sq = max_exp_avg_sq_.data() + s.offset;
      a.params_out = s.params_out;
      a.params_out_dtype = s.params_out_dtype;
      shards.push_back(a);
    }
    optim::AdamOptions options = options_;
    options.grad_scale = grad_scale;
    return optim::FusedAdamStep(options, step, shards);
  }

  int64_t state_bytes() const override {
    return static_cast<int64_t>(exp_avg_.size() + exp_avg_sq_.size() + max_exp_avg_sq_.size()) *
           4;
  }
  void set_lr(double lr) override { options_.lr = lr; }
  absl::StatusOr<std::vector<std::pair<std::string, float*>>> state() override {
    std::vector<std::pair<std::string, float*>> out = {{"exp_avg", exp_avg_.data()},
                                                       {"exp_avg_sq", exp_avg_sq_.data()}};
    if (options_.amsgrad) out.emplace_back("max_exp_avg_sq", max_exp_avg_sq_.data());
    return out;
  }

 private:
  optim::AdamOptions options_;
  std::vector<float> exp_avg_, exp_avg_sq_, max_exp_avg_sq_;
};

class SgdShardOptimizer : public ShardOptimizer {
 public:
  explicit SgdShardOptimizer(const optim::SgdOptions& options) : options_(options) {}
  std::string name() const override { return "SGD"; }

  absl::Status Init(int64_t shard_numel) override {
    numel_ = shard_numel;
    if (options_.momentum != 0) momentum_.assign(shard_numel, 0.0f);
    return absl::OkStatus();
  }

  absl::Status Step(int64_t step, double grad_scale, float* master,
                    absl::Span<const ShardSegment> segments) override {
    std::vector<optim::SgdShard> shards;
    for (const ShardSegment& s : segments) {
      absl::Status ok = CheckSegment(s, numel_, "SGD");
      if (!ok.ok()) return ok;
      optim::SgdShard g;
      g.size = s.size;
      g.params = master + s.offset;
      g.grads = s.grads;
      g.grad_dtype = s.grad_dtype;
      if (!momentum_.empty()) g.momentum_buffer = momentum_.data() + s.offset;
      g.params_out = s.params_out;
      g.params_out_dtype = s.params_out_dtype;
      shards.push_back(g);
    }
    optim::SgdOptions options = options_;
    options.grad_scale = grad_scale;
    return optim::FusedSgdStep(options, step, shards);
  }

  int64_t state_bytes() const override { return static_cast<int64_t>(momentum_.size()) * 4; }
  void set_lr(double lr) override { options_.lr = lr; }
  absl::StatusOr<std::vector<std::pair<std::string, float*>>> state() override {
    std::vector<std::pair<std::string, float*>> out;
    if (!momentum_.empty()) out.emplace_back("momentum_buffer", momentum_.data());
    return out;
  }

 private:
  optim::SgdOptions options_;
  int64_t numel_ = 0;
  std::vector<float> momentum_;
};

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, float*>>> ShardOptimizer::state() {
  return absl::UnimplementedError(absl::StrCat(
      "optimizer ", name(), " does not expose its state (ShardOptimizer::state), so it cannot be "
      "checkpointed"));
}

std::unique_ptr<ShardOptimizer> MakeAdamShardOptimizer(const optim::AdamOptions& options) {
  return std::make_unique<AdamShardOptimizer>(options);
}

std::unique_ptr<ShardOptimizer> MakeSgdShardOptimizer(const optim::SgdOptions& options) {
  return std::make_unique<SgdShardOptimizer>(options);
}

}  // namespace zerotrain::trainer
