// TransferStream: copies between host memory and a device that run beside the compute stream, and
// the Fence that says when one has finished. ZeRO-Offload from a GPU moves each step's gradients
// to pinned host memory and the updated parameters back, and stage 3 stages offloaded parameter
// parts onto the device before their all-gather; the host blocks those copies read or write may
// go back to their pool only after the copy's fence, which is why a fence can be waited on.
//
// On the CPU a copy runs at once on the calling thread and its fence is already signalled: that is
// the implementation the CPU suite runs. The CUDA one (--config=cuda) copies on a stream of its
// own, after the work queued so far on the caller's current stream, and fences with CUDA events.
// This target depends on LibTorch (the rest of offload/ does not).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zerotrain::offload {

class Fence {
 public:
  // What a device implementation waits on.
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual bool done() = 0;
    virtual absl::Status Wait(absl::Duration timeout) = 0;
    virtual absl::Status OrderCurrentStream() = 0;
  };

  Fence() = default;  // already signalled
  explicit Fence(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  bool done() const { return impl_ == nullptr || impl_->done(); }
  // Blocks the host until the copy has finished: DeadlineExceeded after `timeout`, an error that
  // names the cause when the copy failed.
  absl::Status Wait(absl::Duration timeout) const;
  // Makes work queued later on the caller's current device stream wait for the copy, without
  // blocking the host.
  absl::Status OrderCurrentStream() const;
  // Makes the copy's result visible to code reading it on `reader`: the host waits (Wait), a
  // device's current stream is ordered after it (OrderCurrentStream).
  absl::Status ReadyFor(c10::Device reader, absl::Duration timeout) const;

 private:
  std::shared_ptr<Impl> impl_;
};

class TransferStream {
 public:
  virtual ~TransferStream() = default;
  // dst.copy_(src) for tensors of the same number of elements and dtype, on this stream, after
  // the work queued so far on the caller's current stream. Until the fence is done, neither
  // tensor's memory may be reused: device memory is held for this stream by the caching
  // allocator, host memory (a pool block) is the caller's to keep. InvalidArgument names a
  // mismatch; a failed launch is Internal with the cause.
  virtual absl::StatusOr<Fence> Copy(const at::Tensor& dst, const at::Tensor& src) = 0;
  // Runs `launch` with this stream as the caller's current stream, so that device work it queues,
  // or work that orders itself after the current stream (a NCCL collective), follows this
  // stream's copies without making the compute stream wait for them. On the CPU: launch().
  virtual void AfterCopies(const std::function<void()>& launch) { launch(); }
  virtual c10::Device device() const = 0;
};

// The transfer stream for `device`: the CPU's for a CPU device; for a CUDA device, one on a
// stream from LibTorch's pool in a --config=cuda build, FailedPrecondition otherwise.
absl::StatusOr<std::unique_ptr<TransferStream>> MakeTransferStream(c10::Device device);

// The CUDA implementation (transfer_stream_cuda.cc); Unimplemented without --config=cuda.
absl::StatusOr<std::unique_ptr<TransferStream>> MakeCudaTransferStream(c10::Device device);

}  // namespace zerotrain::offload
