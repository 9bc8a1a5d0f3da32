// Option checks and per-step scalars of FusedAdamStep; the loop itself is in kernels_body.h.
#include "optim/adam.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/kernels.h"
#include "optim/shard_step.h"
#include "tools/status_macros.h"

namespace zerotrain::optim {
namespace internal {

absl::Status CheckAdamOptions(const AdamOptions& o, int64_t step) {
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Adam step = ", step, " must be >= 1"));
  }
  ZT_RETURN_IF_ERROR(internal::CheckRange("AdamOptions.lr", o.lr, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(internal::CheckRange("AdamOptions.beta1", o.beta1, 0.0, 1.0, false));
  ZT_RETURN_IF_ERROR(internal::CheckRange("AdamOptions.beta2", o.beta2, 0.0, 1.0, false));
  ZT_RETURN_IF_ERROR(internal::CheckRange("AdamOptions.eps", o.eps, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(
      internal::CheckRange("AdamOptions.weight_decay", o.weight_decay, 0.0, HUGE_VAL));
  if (!(o.grad_scale > 0.0) || !std::isfinite(o.grad_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamOptions.grad_scale = ", o.grad_scale, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

internal::AdamScalars MakeAdamScalars(const AdamOptions& o, int64_t step) {
  const double bias1 = o.bias_correction ? 1.0 - std::pow(o.beta1, static_cast<double>(step)) : 1.0;
  const double bias2 = o.bias_correction ? 1.0 - std::pow(o.beta2, static_cast<double>(step)) : 1.0;
  internal::AdamScalars s;
  s.beta1 = static_cast<float>(o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.eps = static_cast<float>(o.eps);
  s.step_size = static_cast<float>(o.lr / bias1);
  s.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  s.param_decay = o.adamw ? static_cast<float>(1.0 - o.lr * o.weight_decay) : 1.0f;
  s.l2 = o.adamw ? 0.0f : static_cast<float>(o.weight_decay);
  s.grad_mul = static_cast<float>(1.0 / o.grad_scale);
  s.amsgrad = o.amsgrad;
  return s;
}

absl::Status CheckAdamShard(const AdamOptions& options, size_t index, const AdamShard& s) {
  return CheckShard("AdamShard", index, s.size,
                    {{"params", s.params},
                     {"grads", s.grads},
                     {"exp_avg", s.exp_avg},
                     {"exp_avg_sq", s.exp_avg_sq},
                     {"max_exp_avg_sq (amsgrad)", options.amsgrad ? s.max_exp_avg_sq : s.exp_avg}});
}

}  // namespace internal

absl::Status FusedAdamStep(const AdamOptions& options, int64_t step,
                           absl::Span<const AdamShard> shards) {
  ZT_RETURN_IF_ERROR(internal::CheckAdamOptions(options, step));
  std::vector<int64_t> sizes;
  std::vector<internal::Streams> streams;
  std::vector<internal::StreamTypes> types;
  for (size_t i = 0; i < shards.size(); ++i) {
    const AdamShard& s = shards[i];
    ZT_RETURN_IF_ERROR(internal::CheckAdamShard(options, i, s));
    sizes.push_back(s.size);
    internal::Streams st;
    st.param = s.params;
    st.grad = s.grads;
    st.state[0] = s.exp_avg;
    st.state[1] = s.exp_avg_sq;
    st.state[2] = options.amsgrad ? s.max_exp_avg_sq : nullptr;
    st.out = s.params_out;
    streams.push_back(st);
    types.push_back({s.grad_dtype, s.params_out != nullptr, s.params_out_dtype});
  }
  const internal::AdamScalars scalars = internal::MakeAdamScalars(options, step);
  return internal::RunOnShards(
      options.simd, options.threads, sizes,
      [&](const internal::KernelTable& table, int64_t, size_t shard, int64_t begin, int64_t end) {
        table.adam(scalars, types[shard], streams[shard], begin, end);
      });
}

}  // namespace zerotrain::optim
