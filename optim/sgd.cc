// Option checks and per-step scalars of FusedSgdStep; the loop itself is in kernels_body.h.
#include "optim/sgd.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/kernels.h"
#include "optim/shard_step.h"
#include "tools/status_macros.h"

namespace zerotrain::optim {
namespace {

absl::Status CheckOptions(const SgdOptions& o, int64_t step) {
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("SGD step = ", step, " must be >= 1"));
  }
  ZT_RETURN_IF_ERROR(internal::CheckRange("SgdOptions.lr", o.lr, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(internal::CheckRange("SgdOptions.momentum", o.momentum, 0.0, HUGE_VAL));
  ZT_RETURN_IF_ERROR(internal::CheckRange("SgdOptions.dampening", o.dampening, -HUGE_VAL, 1.0));
  ZT_RETURN_IF_ERROR(
      internal::CheckRange("SgdOptions.weight_decay", o.weight_decay, 0.0, HUGE_VAL));
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SgdOptions.nesterov needs momentum > 0 and dampening = 0; got momentum = ", o.momentum,
        ", dampening = ", o.dampening));
  }
  if (!(o.grad_scale > 0.0) || !std::isfinite(o.grad_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SgdOptions.grad_scale = ", o.grad_scale, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FusedSgdStep(const SgdOptions& options, int64_t step,
                          absl::Span<const SgdShard> shards) {
  ZT_RETURN_IF_ERROR(CheckOptions(options, step));
  const bool use_momentum = options.momentum != 0.0;
  std::vector<int64_t> sizes;
  std::vector<internal::Streams> streams;
  std::vector<internal::StreamTypes> types;
  for (size_t i = 0; i < shards.size(); ++i) {
    const SgdShard& s = shards[i];
    ZT_RETURN_IF_ERROR(internal::CheckShard(
        "SgdShard", i, s.size,
        {{"params", s.params},
         {"grads", s.grads},
         {"momentum_buffer (momentum != 0)", use_momentum ? s.momentum_buffer : s.params}}));
    sizes.push_back(s.size);
    internal::Streams st;
    st.param = s.params;
    st.grad = s.grads;
    st.state[0] = use_momentum ? s.momentum_buffer : nullptr;
    st.out = s.params_out;
    streams.push_back(st);
    types.push_back({s.grad_dtype, s.params_out != nullptr, s.params_out_dtype});
  }
  internal::SgdScalars k;
  k.lr = static_cast<float>(options.lr);
  k.momentum = static_cast<float>(options.momentum);
  k.one_minus_dampening = static_cast<float>(1.0 - options.dampening);
  k.weight_decay = static_cast<float>(options.weight_decay);
  k.grad_mul = static_cast<float>(1.0 / options.grad_scale);
  k.use_momentum = use_momentum;
  k.first_step = step == 1;
  k.nesterov = options.nesterov;
  return internal::RunOnShards(
      options.simd, options.threads, sizes,
      [&](const internal::KernelTable& table, int64_t, size_t shard, int64_t begin, int64_t end) {
        table.sgd(k, types[shard], streams[shard], begin, end);
      });
}

}  // namespace zerotrain::optim
