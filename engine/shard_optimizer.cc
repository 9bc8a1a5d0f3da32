// optim/'s fused Adam(W) and SGD behind the ShardOptimizer interface.
#include "engine/shard_optimizer.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/fused_adam_cuda.h"

namespace zerotrain::engine {
namespace {

// A segment outside the sub-group it came with would read or write someone else's memory.
absl::Status CheckSegment(const ShardSegment& s, const ShardState& shard, const char* who) {
  if (s.size < 0 || s.offset < shard.begin || s.offset + s.size > shard.begin + shard.numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": segment [", s.offset, ", ", s.offset + s.size,
                     ") outside the shard's [", shard.begin, ", ", shard.begin + shard.numel, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckStateCount(const ShardState& shard, size_t want, const char* who) {
  if (shard.state.size() == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": given ", shard.state.size(), " state arrays, needs ", want));
}

class AdamShardOptimizer : public ShardOptimizer {
 public:
  explicit AdamShardOptimizer(const optim::AdamOptions& options) : options_(options) {}
  std::string name() const override { return options_.adamw ? "AdamW" : "Adam"; }
  std::vector<std::string> state_names() const override {
    std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
    if (options_.amsgrad) names.push_back("max_exp_avg_sq");
    return names;
  }

  absl::Status Step(int64_t step, double grad_scale, const ShardState& shard,
                    absl::Span<const ShardSegment> segments) override {
    absl::Status ok = CheckStateCount(shard, options_.amsgrad ? 3 : 2, "Adam");
    std::vector<optim::AdamShard> shards;
    for (const ShardSegment& s : segments) {
      if (ok.ok()) ok = CheckSegment(s, shard, "Adam");
      if (!ok.ok()) return ok;
      const int64_t at = s.offset - shard.begin;
      optim::AdamShard a;
      a.size = s.size;
      a.params = shard.master + at;
      a.grads = s.grads;
      a.grad_dtype = s.grad_dtype;
      a.exp_avg = shard.state[0] + at;
      a.exp_avg_sq = shard.state[1] + at;
      if (options_.amsgrad) a.max_exp_avg_sq = shard.state[2] + at;
      a.params_out = s.params_out;
      a.params_out_dtype = s.params_out_dtype;
      shards.push_back(a);
    }
    if (!ok.ok()) return ok;
    optim::AdamOptions options = options_;
    options.grad_scale = grad_scale;
    // The kernel for the memory the state is in; the same options, scalars and results.
    if (shard.device.is_cuda()) return optim::FusedAdamStepCuda(options, step, shards);
    return optim::FusedAdamStep(options, step, shards);
  }

  void set_lr(double lr) override { options_.lr = lr; }
  absl::Status set_betas(double beta1, double beta2) override {
    options_.beta1 = beta1;
    options_.beta2 = beta2;
    return absl::OkStatus();
  }

 private:
  optim::AdamOptions options_;
};

class SgdShardOptimizer : public ShardOptimizer {
 public:
  explicit SgdShardOptimizer(const optim::SgdOptions& options) : options_(options) {}
  std::string name() const override { return "SGD"; }
  std::vector<std::string> state_names() const override {
    if (options_.momentum == 0) return {};
    return {"momentum_buffer"};
  }

  absl::Status Step(int64_t step, double grad_scale, const ShardState& shard,
                    absl::Span<const ShardSegment> segments) override {
    const bool momentum = options_.momentum != 0;
    if (!shard.device.is_cpu()) {
      return absl::UnimplementedError(
          absl::StrCat("SGD: the state is on ", shard.device.str(),
                       " and SGD has only a CPU kernel; use Adam/AdamW on a CUDA device"));
    }
    absl::Status ok = CheckStateCount(shard, momentum ? 1 : 0, "SGD");
    std::vector<optim::SgdShard> shards;
    for (const ShardSegment& s : segments) {
      if (ok.ok()) ok = CheckSegment(s, shard, "SGD");
      if (!ok.ok()) return ok;
      const int64_t at = s.offset - shard.begin;
      optim::SgdShard g;
      g.size = s.size;
      g.params = shard.master + at;
      g.grads = s.grads;
      g.grad_dtype = s.grad_dtype;
      if (momentum) g.momentum_buffer = shard.state[0] + at;
      g.params_out = s.params_out;
      g.params_out_dtype = s.params_out_dtype;
      shards.push_back(g);
    }
    if (!ok.ok()) return ok;
    optim::SgdOptions options = options_;
    options.grad_scale = grad_scale;
    return optim::FusedSgdStep(options, step, shards);
  }

  void set_lr(double lr) override { options_.lr = lr; }

 private:
  optim::SgdOptions options_;
};

}  // namespace

std::unique_ptr<ShardOptimizer> MakeAdamShardOptimizer(const optim::AdamOptions& options) {
  return std::make_unique<AdamShardOptimizer>(options);
}

std::unique_ptr<ShardOptimizer> MakeSgdShardOptimizer(const optim::SgdOptions& options) {
  return std::make_unique<SgdShardOptimizer>(options);
}

}  // namespace zerotrain::engine
