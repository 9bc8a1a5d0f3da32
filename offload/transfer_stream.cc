// Fence's waits and the CPU's TransferStream: copies that finish before Copy returns.
#include "offload/transfer_stream.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"

namespace zerotrain::offload {

absl::Status Fence::Wait(absl::Duration timeout) const {
  return impl_ == nullptr ? absl::OkStatus() : impl_->Wait(timeout);
}

absl::Status Fence::OrderCurrentStream() const {
  return impl_ == nullptr ? absl::OkStatus() : impl_->OrderCurrentStream();
}

absl::Status Fence::ReadyFor(c10::Device reader, absl::Duration timeout) const {
  return reader.is_cpu() ? Wait(timeout) : OrderCurrentStream();
}

namespace {

class CpuTransferStream : public TransferStream {
 public:
  absl::StatusOr<Fence> Copy(const at::Tensor& dst, const at::Tensor& src) override {
    if (!dst.defined() || !src.defined() || dst.numel() != src.numel() ||
        dst.scalar_type() != src.scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TransferStream::Copy: dst and src must be tensors of the same numel and dtype, got ",
          dst.defined() ? absl::StrCat(dst.numel(), " ", c10::toString(dst.scalar_type()))
                        : "undefined",
          " and ",
          src.defined() ? absl::StrCat(src.numel(), " ", c10::toString(src.scalar_type()))
                        : "undefined"));
    }
    try {
      at::Tensor d = dst;
      d.view({-1}).copy_(src.reshape({-1}));
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("TransferStream::Copy on cpu: ", e.what_without_backtrace()));
    }
    return Fence();
  }
  c10::Device device() const override { return c10::Device(c10::kCPU); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransferStream>> MakeTransferStream(c10::Device device) {
  if (device.is_cpu()) return std::unique_ptr<TransferStream>(new CpuTransferStream());
  if (device.is_cuda()) {
    absl::StatusOr<std::unique_ptr<TransferStream>> s = MakeCudaTransferStream(device);
    if (s.ok()) return s;
    return absl::FailedPreconditionError(
        absl::StrCat("TransferStream for ", device.str(), ": ", s.status().message()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("TransferStream: device ", device.str(), " (cpu or cuda)"));
}

}  // namespace zerotrain::offload
