// SubGroupStore's gradient pass: backward's reduced gradients streamed into the store in shard
// order, one sub-group in memory at a time (the buffers VisitWithGrads reads into, idle during
// backward), each written out as the pass moves past it.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "offload/sub_group_store.h"
#include "offload/sub_group_store_impl.h"
#include "tools/status_macros.h"

namespace zerotrain::offload {

float* SubGroupStore::Impl::PassGrads(int g) {
  if (o.device == StoreDevice::kHost) return grad_blocks[0].as<float>() + Begin(g);
  return grad_blocks[g % grad_blocks.size()].as<float>();
}

absl::Status SubGroupStore::Impl::OpenGrads(int g) {
  float* grads = PassGrads(g);
  if (o.device == StoreDevice::kNvme) {
    const int b = g % static_cast<int>(grad_blocks.size());
    // The buffer's previous sub-group is still being written out.
    ZT_RETURN_IF_ERROR(Wait(grad_in_flight[b]));
    if (pass.accumulate) {
      ZT_RETURN_IF_ERROR(StartGrads(IoOp::kRead, g, b));
      ZT_RETURN_IF_ERROR(Wait(grad_in_flight[b]));
    }
  }
  if (!pass.accumulate) std::memset(grads, 0, Numel(g) * sizeof(float));
  pass.open = g;
  return absl::OkStatus();
}

absl::Status SubGroupStore::Impl::CloseGrads() {
  const int g = pass.open;
  pass.open = -1;
  pass.next = g + 1;
  if (pass.on_summed) ZT_RETURN_IF_ERROR(pass.on_summed(Begin(g), PassGrads(g), Numel(g)));
  if (o.device == StoreDevice::kHost) return absl::OkStatus();
  return StartGrads(IoOp::kWrite, g, g % static_cast<int>(grad_blocks.size()));
}

// Sub-groups no range touched are finished too: zeroed (or, accumulating, left as they were) and
// still shown to on_summed, whose sums must cover every gradient.
absl::Status SubGroupStore::Impl::AdvanceGrads(int target) {
  if (pass.open == target) return absl::OkStatus();
  if (pass.open >= 0) ZT_RETURN_IF_ERROR(CloseGrads());
  for (int g = pass.next; g < target; ++g) {
    ZT_RETURN_IF_ERROR(OpenGrads(g));
    ZT_RETURN_IF_ERROR(CloseGrads());
  }
  return target < Groups() ? OpenGrads(target) : absl::OkStatus();
}

absl::Status SubGroupStore::BeginGrads(bool accumulate, GradSumsFn on_summed) {
  Impl& m = *impl_;
  if (!options_.grads) {
    return absl::FailedPreconditionError(
        "SubGroupStore: BeginGrads on a store without the grads option");
  }
  if (!m.poison.ok()) return m.PoisonedError();
  if (m.visiting) return absl::FailedPreconditionError("SubGroupStore: BeginGrads inside a Visit");
  // An abandoned pass may still be writing a sub-group out.
  ZT_RETURN_IF_ERROR(m.Drain());
  m.grads_complete = false;
  m.pass = Impl::GradPass();
  m.pass.active = true;
  m.pass.accumulate = accumulate;
  m.pass.on_summed = std::move(on_summed);
  return absl::OkStatus();
}

absl::Status SubGroupStore::AddGrads(int64_t begin, const float* grads, int64_t numel) {
  Impl& m = *impl_;
  if (!m.pass.active) {
    return absl::FailedPreconditionError("SubGroupStore: AddGrads outside a gradient pass");
  }
  if (!m.poison.ok()) return m.PoisonedError();
  if (begin < m.pass.end || numel < 0 || begin + numel > options_.numel) {
    const std::string rule = absl::StrCat(
        "ranges must be in increasing order, not overlap, and "
        "end by numel = ",
        options_.numel, " (the pass had reached ", m.pass.end, ")");
    m.pass.active = false;
    return absl::InvalidArgumentError(
        absl::StrCat("SubGroupStore: AddGrads(", begin, ", ", numel, "): ", rule));
  }
  absl::Status status;
  while (numel > 0 && status.ok()) {
    const int g = static_cast<int>(begin / options_.sub_group_numel);
    status = m.AdvanceGrads(g);
    if (!status.ok()) break;
    const int64_t n = std::min(numel, m.Begin(g) + m.Numel(g) - begin);
    float* dst = m.PassGrads(g) + (begin - m.Begin(g));
    for (int64_t i = 0; i < n; ++i) dst[i] += grads[i];
    begin += n;
    grads += n;
    numel -= n;
  }
  m.pass.end = begin;
  if (!status.ok()) m.pass.active = false;
  return status;
}

absl::Status SubGroupStore::FinishGrads() {
  Impl& m = *impl_;
  if (!m.pass.active) {
    return absl::FailedPreconditionError("SubGroupStore: FinishGrads outside a gradient pass");
  }
  absl::Status status = m.poison.ok() ? m.AdvanceGrads(m.Groups()) : m.PoisonedError();
  m.pass.active = false;
  absl::Status drained = m.Drain();
  if (status.ok()) status = drained;
  m.grads_complete = status.ok();
  return status;
}

}  // namespace zerotrain::offload
