// The CUDA TransferStream (built under --config=cuda; transfer_stream_no_cuda.cc otherwise): each
// copy waits for an event recorded on the caller's current stream, runs on a stream from
// LibTorch's pool, and records an event its Fence polls, so a host wait is bounded by its timeout.
// Not yet run on a GPU (docs/OFFLOAD.md).
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "offload/transfer_stream.h"

namespace zerotrain::offload {
namespace {

absl::Status CudaError(const std::string& what, cudaError_t e) {
  return absl::InternalError(absl::StrCat("TransferStream: ", what, ": ", cudaGetErrorString(e)));
}

class EventFence : public Fence::Impl {
 public:
  EventFence(cudaEvent_t event, c10::DeviceIndex device) : event_(event), device_(device) {}
  ~EventFence() override { cudaEventDestroy(event_); }
  bool done() override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  absl::Status Wait(absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    absl::Duration nap = absl::Microseconds(20);
    while (true) {
      const cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaError("waiting for a copy", e);
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("TransferStream: a copy on cuda:", device_,
                                                        " did not finish within ",
                                                        absl::FormatDuration(timeout)));
      }
      absl::SleepFor(nap);
      nap = std::min(nap * 2, absl::Milliseconds(1));
    }
  }
  absl::Status OrderCurrentStream() override {
    c10::cuda::CUDAGuard guard(device_);
    const cudaError_t e =
        cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), event_, 0);
    return e == cudaSuccess ? absl::OkStatus() : CudaError("ordering compute after a copy", e);
  }

 private:
  cudaEvent_t event_;
  c10::DeviceIndex device_;
};

class CudaTransferStream : public TransferStream {
 public:
  explicit CudaTransferStream(c10::Device device)
      : device_(device), stream_(c10::cuda::getStreamFromPool(false, device.index())) {}

  absl::StatusOr<Fence> Copy(const at::Tensor& dst, const at::Tensor& src) override {
    if (!dst.defined() || !src.defined() || dst.numel() != src.numel() ||
        dst.scalar_type() != src.scalar_type()) {
      return absl::InvalidArgumentError(
          "TransferStream::Copy: dst and src must be tensors of the same numel and dtype");
    }
    c10::cuda::CUDAGuard guard(device_);
    cudaEvent_t ready = nullptr, done = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    if (e != cudaSuccess) return CudaError("cudaEventCreate", e);
    e = cudaEventRecord(ready, c10::cuda::getCurrentCUDAStream(device_.index()).stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_.stream(), ready, 0);
    cudaEventDestroy(ready);  // the wait is enqueued; the event may go
    if (e != cudaSuccess) return CudaError("ordering the copy after compute", e);
    try {
      c10::cuda::CUDAStreamGuard on(stream_);
      at::Tensor d = dst;
      d.view({-1}).copy_(src.reshape({-1}), /*non_blocking=*/true);
    } catch (const c10::Error& err) {
      return absl::InternalError(absl::StrCat("TransferStream::Copy on ", device_.str(), ": ",
                                              err.what_without_backtrace()));
    }
    // The caching allocator must not hand device memory out again before this stream is done.
    for (const at::Tensor* t : {&dst, &src}) {
      if (t->is_cuda())
        c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), stream_);
    }
    // The copy is queued: without a fence to hand back, the caller would free its buffers while
    // it runs, so an error here first waits for the stream.
    e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      cudaStreamSynchronize(stream_.stream());
      return CudaError("cudaEventCreate", e);
    }
    auto fence = std::make_shared<EventFence>(done, device_.index());
    e = cudaEventRecord(done, stream_.stream());
    if (e != cudaSuccess) {
      cudaStreamSynchronize(stream_.stream());
      return CudaError("cudaEventRecord", e);
    }
    return Fence(std::move(fence));
  }
  void AfterCopies(const std::function<void()>& launch) override {
    c10::cuda::CUDAStreamGuard on(stream_);
    launch();
  }
  c10::Device device() const override { return device_; }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransferStream>> MakeCudaTransferStream(c10::Device device) {
  try {
    return std::unique_ptr<TransferStream>(new CudaTransferStream(device));
  } catch (const c10::Error& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("no stream on ", device.str(), ": ", e.what_without_backtrace()));
  }
}

}  // namespace zerotrain::offload
