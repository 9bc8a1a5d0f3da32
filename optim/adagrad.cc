// Option checks and per-step scalars of FusedAdagradStep; the loop itself is in kernels_body.h.
#include "optim/adagrad.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/kernels.h"
#include "optim/shard_step.h"
#include "tools/status_macros.h"

namespace zerotrain::optim {
namespace {

absl::Status CheckOptions(const AdagradOptions& o, int64_t step) {
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Adagrad step = ", step, " must be >= 1"));
  }
  ZT_RETURN_IF_ERROR(internal::CheckRange("AdagradOptions.lr", o.lr, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(internal::CheckRange("AdagradOptions.lr_decay", o.lr_decay, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(
      internal::CheckRange("AdagradOptions.weight_decay", o.weight_decay, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(internal::CheckRange("AdagradOptions.eps", o.eps, 0.0, HUGE_VAL));
  if (!(o.grad_scale > 0.0) || !std::isfinite(o.grad_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdagradOptions.grad_scale = ", o.grad_scale, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FusedAdagradStep(const AdagradOptions& options, int64_t step,
                              absl::Span<const AdagradShard> shards) {
  ZT_RETURN_IF_ERROR(CheckOptions(options, step));
  std::vector<int64_t> sizes;
  std::vector<internal::Streams> streams;
  std::vector<internal::StreamTypes> types;
  for (size_t i = 0; i < shards.size(); ++i) {
    const AdagradShard& s = shards[i];
    ZT_RETURN_IF_ERROR(internal::CheckShard(
        "AdagradShard", i, s.size, {{"params", s.params}, {"grads", s.grads}, {"sum", s.sum}}));
    sizes.push_back(s.size);
    internal::Streams st;
    st.param = s.params;
    st.grad = s.grads;
    st.state[0] = s.sum;
    st.out = s.params_out;
    streams.push_back(st);
    types.push_back({s.grad_dtype, s.params_out != nullptr, s.params_out_dtype});
  }
  internal::AdagradScalars k;
  k.clr = static_cast<float>(options.lr / (1.0 + static_cast<double>(step - 1) * options.lr_decay));
  k.eps = static_cast<float>(options.eps);
  k.weight_decay = static_cast<float>(options.weight_decay);
  k.grad_mul = static_cast<float>(1.0 / options.grad_scale);
  return internal::RunOnShards(
      options.simd, options.threads, sizes,
      [&](const internal::KernelTable& table, int64_t, size_t shard, int64_t begin, int64_t end) {
        table.adagrad(k, types[shard], streams[shard], begin, end);
      });
}

}  // namespace zerotrain::optim
