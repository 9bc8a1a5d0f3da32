// LAMB's option checks, per-step scalars and the two passes' front ends.
#include "optim/lamb.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "optim/kernels.h"
#include "optim/shard_step.h"
#include "tools/status_macros.h"

namespace zerotrain::optim {
namespace {

absl::Status CheckOptions(const LambOptions& o, int64_t step) {
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("LAMB step = ", step, " must be >= 1"));
  }
  ZT_RETURN_IF_ERROR(internal::CheckRange("LambOptions.lr", o.lr, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(internal::CheckRange("LambOptions.beta1", o.beta1, 0.0, 1.0, false));
  ZT_RETURN_IF_ERROR(internal::CheckRange("LambOptions.beta2", o.beta2, 0.0, 1.0, false));
  if (!(o.eps > 0.0) || !std::isfinite(o.eps)) {
    return absl::InvalidArgumentError(absl::StrCat("LambOptions.eps = ", o.eps, " must be > 0"));
  }
  ZT_RETURN_IF_ERROR(
      internal::CheckRange("LambOptions.weight_decay", o.weight_decay, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(internal::CheckRange("LambOptions.min_coeff", o.min_coeff, 0.0, o.max_coeff));
  if (!(o.grad_scale > 0.0) || !std::isfinite(o.grad_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LambOptions.grad_scale = ", o.grad_scale, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

internal::LambScalars MakeScalars(const LambOptions& o) {
  internal::LambScalars s;
  s.beta1 = static_cast<float>(o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.eps_in_sqrt = o.eps_inside_sqrt ? static_cast<float>(o.eps) : 0.0f;
  s.eps = o.eps_inside_sqrt ? 0.0f : static_cast<float>(o.eps);
  s.weight_decay = static_cast<float>(o.weight_decay);
  s.grad_mul = static_cast<float>(1.0 / o.grad_scale);
  s.neg_step_trust = 0.0f;
  return s;
}

// FusedLamb's step size: the bias corrections of both moments, folded into lr.
double StepSize(const LambOptions& o, int64_t step) {
  if (!o.bias_correction) return o.lr;
  const double t = static_cast<double>(step);
  return o.lr * std::sqrt(1.0 - std::pow(o.beta2, t)) / (1.0 - std::pow(o.beta1, t));
}

// Checks every shard (the gradient only when the pass reads it) and builds its streams.
absl::Status Prepare(absl::Span<const LambShard> shards, bool need_grads,
                     std::vector<int64_t>& sizes, std::vector<internal::Streams>& streams,
                     std::vector<internal::StreamTypes>& types) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const LambShard& s = shards[i];
    ZT_RETURN_IF_ERROR(internal::CheckShard("LambShard", i, s.size,
                                            {{"params", s.params},
                                             {"grads", need_grads ? s.grads : s.params},
                                             {"exp_avg", s.exp_avg},
                                             {"exp_avg_sq", s.exp_avg_sq}}));
    sizes.push_back(s.size);
    internal::Streams st;
    st.param = s.params;
    st.grad = need_grads ? s.grads : nullptr;
    st.state[0] = s.exp_avg;
    st.state[1] = s.exp_avg_sq;
    st.out = need_grads ? nullptr : s.params_out;
    streams.push_back(st);
    types.push_back({s.grad_dtype, st.out != nullptr, s.params_out_dtype});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<LambNorms>> LambUpdateMoments(const LambOptions& options, int64_t step,
                                                         absl::Span<const LambShard> shards) {
  ZT_RETURN_IF_ERROR(CheckOptions(options, step));
  std::vector<int64_t> sizes;
  std::vector<internal::Streams> streams;
  std::vector<internal::StreamTypes> types;
  ZT_RETURN_IF_ERROR(Prepare(shards, true, sizes, streams, types));
  const internal::LambScalars scalars = MakeScalars(options);
  std::vector<internal::SquaredNorms> partial(internal::CountChunks(sizes));
  std::vector<size_t> shard_of(partial.size());
  ZT_RETURN_IF_ERROR(internal::RunOnShards(
      options.simd, options.threads, sizes,
      [&](const internal::KernelTable& table, int64_t chunk, size_t s, int64_t b, int64_t e) {
        partial[chunk] = table.lamb_moments(scalars, types[s], streams[s], b, e);
        shard_of[chunk] = s;
      }));
  std::vector<LambNorms> norms(shards.size());
  for (size_t c = 0; c < partial.size(); ++c) {  // fixed order: independent of thread count
    norms[shard_of[c]].param_sq += partial[c].param;
    norms[shard_of[c]].update_sq += partial[c].update;
  }
  return norms;
}

double LambTrustRatio(const LambOptions& options, const LambNorms& tensor) {
  const double p = std::sqrt(tensor.param_sq), u = std::sqrt(tensor.update_sq);
  if (p == 0.0 || u == 0.0) return 1.0;
  return std::fmin(options.max_coeff, std::fmax(options.min_coeff, p / u));
}

absl::Status LambApplyUpdate(const LambOptions& options, int64_t step,
                             absl::Span<const LambShard> shards,
                             absl::Span<const double> trust_ratios) {
  ZT_RETURN_IF_ERROR(CheckOptions(options, step));
  if (trust_ratios.size() != shards.size()) {
    return absl::InvalidArgumentError(absl::StrCat("LambApplyUpdate: ", trust_ratios.size(),
                                                   " trust ratios for ", shards.size(), " shards"));
  }
  std::vector<int64_t> sizes;
  std::vector<internal::Streams> streams;
  std::vector<internal::StreamTypes> types;
  ZT_RETURN_IF_ERROR(Prepare(shards, false, sizes, streams, types));
  std::vector<internal::LambScalars> scalars(shards.size(), MakeScalars(options));
  const double step_size = StepSize(options, step);
  for (size_t i = 0; i < shards.size(); ++i) {
    scalars[i].neg_step_trust = static_cast<float>(-step_size * trust_ratios[i]);
  }
  return internal::RunOnShards(
      options.simd, options.threads, sizes,
      [&](const internal::KernelTable& table, int64_t, size_t s, int64_t b, int64_t e) {
        table.lamb_apply(scalars[s], types[s], streams[s], b, e);
      });
}

absl::Status FusedLambStep(const LambOptions& options, int64_t step,
                           absl::Span<const LambShard> shards) {
  ZT_ASSIGN_OR_RETURN(const std::vector<LambNorms> norms, LambUpdateMoments(options, step, shards));
  std::vector<double> trust(norms.size());
  for (size_t i = 0; i < norms.size(); ++i) trust[i] = LambTrustRatio(options, norms[i]);
  return LambApplyUpdate(options, step, shards, trust);
}

}  // namespace zerotrain::optim
