// StoreGradSink: reduced gradient slices into the state store's gradient pass (see the header).
#include "engine/store_grad_sink.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/grad_stats.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::Status StoreGradSink::Begin(bool accumulate) {
  if (store_ == nullptr) {
    return absl::FailedPreconditionError("StoreGradSink: no store attached");
  }
  summing_ = at::zeros({2}, at::kDouble);
  // Sub-groups reach on_summed once their values are final: the step's statistics come from
  // them, so they cover what accumulated over the earlier micro steps too.
  return store_->BeginGrads(
      accumulate, [this](int64_t begin, const float* grads, int64_t numel) -> absl::Status {
        const at::Tensor values = at::from_blob(const_cast<float*>(grads), {numel}, at::kFloat);
        ZT_ASSIGN_OR_RETURN(const at::Tensor part,
                            HostGradStats({values}, GradStatsRequest{true, true}));
        double* sum = summing_.data_ptr<double>();
        const double* add = part.data_ptr<double>();
        sum[0] = std::max(sum[0], add[0]);
        sum[1] += add[1];
        return absl::OkStatus();
      });
}

absl::Status StoreGradSink::Add(int64_t shard_offset, const at::Tensor& reduced) {
  try {
    // fp32 host gradients pass as they are; others (bf16, a device's) are converted first.
    const at::Tensor host = reduced.to(at::kCPU, at::kFloat).contiguous();
    return store_->AddGrads(shard_offset, host.data_ptr<float>(), host.numel());
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("StoreGradSink: gradients at shard offset ",
                                            shard_offset, ": ", e.what_without_backtrace()));
  }
}

absl::Status StoreGradSink::Finish() {
  ZT_RETURN_IF_ERROR(store_->FinishGrads());
  stats_ = summing_;
  return absl::OkStatus();
}

}  // namespace zerotrain::engine
