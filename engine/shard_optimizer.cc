// optim/'s fused Adam(W), SGD, Adagrad and LAMB, and Muon's apply step, behind the ShardOptimizer
// interface.
#include "engine/shard_optimizer.h"

#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

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

// The optimizers that have only CPU kernels.
absl::Status CheckOnHost(const ShardState& shard, const char* who) {
  if (shard.runtime->RunsHostKernels()) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(who, ": the state is on ", shard.runtime->device().str(), " and ", who,
                   " has only a CPU kernel; use Adam/AdamW on a CUDA device"));
}

// optim/'s shard structs share these members; `set_states` points the state arrays of the
// element `at` elements into the shard. With `need_sums`, each segment must name its tensor's sums.
template <class Shard, class SetStates>
absl::StatusOr<std::vector<Shard>> ToShards(const ShardState& shard,
                                            absl::Span<const ShardSegment> segments,
                                            size_t num_states, bool need_sums, const char* who,
                                            SetStates set_states) {
  ZT_RETURN_IF_ERROR(CheckStateCount(shard, num_states, who));
  std::vector<Shard> shards;
  for (const ShardSegment& s : segments) {
    ZT_RETURN_IF_ERROR(CheckSegment(s, shard, who));
    if (need_sums && s.tensor_sums == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": segment at ", s.offset, " has no tensor sums"));
    }
    const int64_t at = s.offset - shard.begin;
    Shard a;
    a.size = s.size;
    a.params = shard.master + at;
    a.grads = s.grads;
    a.grad_dtype = s.grad_dtype;
    a.params_out = s.params_out;
    a.params_out_dtype = s.params_out_dtype;
    set_states(a, at);
    shards.push_back(a);
  }
  return shards;
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
    ZT_ASSIGN_OR_RETURN(const std::vector<optim::AdamShard> shards,
                        ToShards<optim::AdamShard>(shard, segments, options_.amsgrad ? 3 : 2, false,
                                                   "Adam", [&](optim::AdamShard& a, int64_t at) {
                                                     a.exp_avg = shard.state[0] + at;
                                                     a.exp_avg_sq = shard.state[1] + at;
                                                     if (options_.amsgrad)
                                                       a.max_exp_avg_sq = shard.state[2] + at;
                                                   }));
    optim::AdamOptions options = options_;
    options.grad_scale = grad_scale;
    // The kernel for the memory the state is in; the same options, scalars and results.
    return shard.runtime->AdamStep(options, step, shards);
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
    ZT_RETURN_IF_ERROR(CheckOnHost(shard, "SGD"));
    ZT_ASSIGN_OR_RETURN(const std::vector<optim::SgdShard> shards,
                        ToShards<optim::SgdShard>(shard, segments, momentum ? 1 : 0, false, "SGD",
                                                  [&](optim::SgdShard& g, int64_t at) {
                                                    if (momentum)
                                                      g.momentum_buffer = shard.state[0] + at;
                                                  }));
    optim::SgdOptions options = options_;
    options.grad_scale = grad_scale;
    return optim::FusedSgdStep(options, step, shards);
  }

  void set_lr(double lr) override { options_.lr = lr; }

 private:
  optim::SgdOptions options_;
};

class AdagradShardOptimizer : public ShardOptimizer {
 public:
  AdagradShardOptimizer(const optim::AdagradOptions& options, double initial_accumulator_value)
      : options_(options), initial_(static_cast<float>(initial_accumulator_value)) {}
  std::string name() const override { return "Adagrad"; }
  std::vector<std::string> state_names() const override { return {"sum"}; }  // torch's name
  std::vector<float> initial_state() const override { return {initial_}; }

  absl::Status Step(int64_t step, double grad_scale, const ShardState& shard,
                    absl::Span<const ShardSegment> segments) override {
    ZT_RETURN_IF_ERROR(CheckOnHost(shard, "Adagrad"));
    ZT_ASSIGN_OR_RETURN(const std::vector<optim::AdagradShard> shards,
                        ToShards<optim::AdagradShard>(shard, segments, 1, false, "Adagrad",
                                                      [&](optim::AdagradShard& a, int64_t at) {
                                                        a.sum = shard.state[0] + at;
                                                      }));
    optim::AdagradOptions options = options_;
    options.grad_scale = grad_scale;
    return optim::FusedAdagradStep(options, step, shards);
  }

  void set_lr(double lr) override { options_.lr = lr; }

 private:
  optim::AdagradOptions options_;
  float initial_;
};

// Pass 1 updates the moments and adds each segment's |p|^2 and |u|^2 to its tensor's sums; pass 2
// applies the update with the trust ratio of the tensor's totals.
class LambShardOptimizer : public ShardOptimizer {
 public:
  explicit LambShardOptimizer(const optim::LambOptions& options) : options_(options) {}
  std::string name() const override { return "Lamb"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  int tensor_sums() const override { return 2; }

  absl::Status AddTensorSums(int64_t step, double grad_scale, const ShardState& shard,
                             absl::Span<const ShardSegment> segments) override {
    ZT_ASSIGN_OR_RETURN(const std::vector<optim::LambShard> shards, Shards(shard, segments));
    ZT_ASSIGN_OR_RETURN(const std::vector<optim::LambNorms> norms,
                        optim::LambUpdateMoments(Options(grad_scale), step, shards));
    for (size_t i = 0; i < norms.size(); ++i) {
      segments[i].tensor_sums[0] += norms[i].param_sq;
      segments[i].tensor_sums[1] += norms[i].update_sq;
    }
    return absl::OkStatus();
  }

  absl::Status Step(int64_t step, double grad_scale, const ShardState& shard,
                    absl::Span<const ShardSegment> segments) override {
    ZT_ASSIGN_OR_RETURN(const std::vector<optim::LambShard> shards, Shards(shard, segments));
    std::vector<double> trust;
    for (const ShardSegment& s : segments) {
      trust.push_back(optim::LambTrustRatio(options_, {s.tensor_sums[0], s.tensor_sums[1]}));
    }
    return optim::LambApplyUpdate(Options(grad_scale), step, shards, trust);
  }

  void set_lr(double lr) override { options_.lr = lr; }
  absl::Status set_betas(double beta1, double beta2) override {
    options_.beta1 = beta1;
    options_.beta2 = beta2;
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::vector<optim::LambShard>> Shards(const ShardState& shard,
                                                       absl::Span<const ShardSegment> segments) {
    ZT_RETURN_IF_ERROR(CheckOnHost(shard, "Lamb"));
    return ToShards<optim::LambShard>(shard, segments, 2, true, "Lamb",
                                      [&](optim::LambShard& a, int64_t at) {
                                        a.exp_avg = shard.state[0] + at;
                                        a.exp_avg_sq = shard.state[1] + at;
                                      });
  }
  optim::LambOptions Options(double grad_scale) const {
    optim::LambOptions o = options_;
    o.grad_scale = grad_scale;
    return o;
  }

  optim::LambOptions options_;
};

// Muon's segments are stepped with LibTorch ops on the state's device (one code path for host and
// GPU memory), in DeepSpeed's order: the gradient unscaled, then decay, then the update.
class MuonShardOptimizer : public ShardOptimizer {
 public:
  explicit MuonShardOptimizer(const MuonStepOptions& options)
      : options_(options), adam_(options.adam) {}
  std::string name() const override { return "Muon"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  int param_groups() const override { return 2; }
  // The momentum is exp_avg for both groups; only Adam's parameters have a second moment, so
  // Muon's keep one buffer, as DeepSpeed's MuonWithAuxAdam does.
  std::vector<int> state_array_groups() const override { return {-1, 0}; }

  absl::Status Step(int64_t step, double grad_scale, const ShardState& shard,
                    absl::Span<const ShardSegment> segments) override {
    std::vector<ShardSegment> adam;
    for (const ShardSegment& s : segments) {
      ZT_RETURN_IF_ERROR(CheckSegment(s, shard, "Muon"));
      if (s.param_group == 0) {
        adam.push_back(s);
        continue;
      }
      try {
        ApplyUpdate(grad_scale, shard, s);
      } catch (const c10::Error& e) {
        return absl::InternalError(absl::StrCat("Muon: ", e.what_without_backtrace()));
      }
    }
    return adam.empty() ? absl::OkStatus() : adam_.Step(step, grad_scale, shard, adam);
  }

  // DeepSpeed's LR schedulers write one lr into every parameter group.
  void set_lr(double lr) override {
    options_.lr = lr;
    adam_.set_lr(lr);
  }
  absl::Status set_betas(double beta1, double beta2) override {
    return adam_.set_betas(beta1, beta2);
  }

 private:
  void ApplyUpdate(double grad_scale, const ShardState& shard, const ShardSegment& s) const {
    const at::TensorOptions on = at::TensorOptions().device(shard.runtime->device());
    at::Tensor p =
        at::from_blob(shard.master + (s.offset - shard.begin), {s.size}, on.dtype(at::kFloat));
    at::Tensor u =
        at::from_blob(const_cast<void*>(s.grads), {s.size}, on.dtype(ToScalarType(s.grad_dtype)))
            .to(at::kFloat);
    if (grad_scale != 1.0) u = u.mul(1.0 / grad_scale);
    p.mul_(1.0 - options_.lr * options_.weight_decay);
    p.add_(u, -options_.lr);
    if (s.params_out != nullptr) {
      at::from_blob(s.params_out, {s.size}, on.dtype(ToScalarType(s.params_out_dtype))).copy_(p);
    }
  }
  static at::ScalarType ToScalarType(optim::DType t) {
    return t == optim::DType::kBFloat16  ? at::kBFloat16
           : t == optim::DType::kFloat16 ? at::kHalf
                                         : at::kFloat;
  }

  MuonStepOptions options_;
  AdamShardOptimizer adam_;
};

}  // namespace

std::unique_ptr<ShardOptimizer> MakeMuonShardOptimizer(const MuonStepOptions& options) {
  return std::make_unique<MuonShardOptimizer>(options);
}

std::unique_ptr<ShardOptimizer> MakeAdamShardOptimizer(const optim::AdamOptions& options) {
  return std::make_unique<AdamShardOptimizer>(options);
}

std::unique_ptr<ShardOptimizer> MakeSgdShardOptimizer(const optim::SgdOptions& options) {
  return std::make_unique<SgdShardOptimizer>(options);
}

std::unique_ptr<ShardOptimizer> MakeAdagradShardOptimizer(const optim::AdagradOptions& options,
                                                          double initial_accumulator_value) {
  return std::make_unique<AdagradShardOptimizer>(options, initial_accumulator_value);
}

std::unique_ptr<ShardOptimizer> MakeLambShardOptimizer(const optim::LambOptions& options) {
  return std::make_unique<LambShardOptimizer>(options);
}

}  // namespace zerotrain::engine
