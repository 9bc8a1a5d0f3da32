// NCCL backend (built under --config=cuda): CUDA tensors over NCCL on a stream of its own. Each op
// waits for the compute stream's work so far (an event), runs on the comm stream, and the compute
// stream waits for its completion event when the op is waited on. NCCL's unique id travels through
// the group's store; the communicator is non-blocking so init and ops can be bounded, and aborted
// locally on failure (peers stuck in the same op end through their own timeouts).
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/backend.h"

namespace zerotrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<ncclDataType_t> ToNccl(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    case at::kChar:
      return ncclInt8;
    default:
      return absl::InvalidArgumentError(absl::StrCat("nccl: no NCCL type for ", c10::toString(t)));
  }
}

absl::Status NcclError(const char* what, ncclResult_t r, ncclComm_t comm) {
  std::string detail = comm ? ncclGetLastError(comm) : "";
  return absl::AbortedError(absl::StrCat("nccl: ", what, ": ", ncclGetErrorString(r),
                                         detail.empty() ? "" : " (", detail,
                                         detail.empty() ? "" : ")"));
}

// Polls a non-blocking communicator until `done` holds, an async error shows up, or time runs out.
template <typename Done>
absl::Status PollComm(ncclComm_t comm, std::chrono::milliseconds timeout, const char* what,
                      Done done) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) return NcclError(what, async, comm);
    if (async == ncclSuccess && done()) return absl::OkStatus();
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("nccl: ", what, " timed out after ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// A CUDA event that lives as long as the op's Work, waited on or not.
class Event {
 public:
  Event() { status_ = cudaEventCreateWithFlags(&event_, cudaEventDisableTiming); }
  ~Event() {
    if (status_ == cudaSuccess) cudaEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaError_t status() const { return status_; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  cudaError_t status_;
};

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::InternalError(absl::StrCat("cuda: ", what, ": ", cudaGetErrorString(e)));
}

// The communicator, shared with in-flight steps: the first failure aborts it (which also frees
// peers blocked in the op); later aborts and the backend's destruction then leave it alone.
class CommHandle {
 public:
  explicit CommHandle(ncclComm_t comm) : comm_(comm) {}
  ~CommHandle() {
    if (!aborted_.exchange(true)) ncclCommDestroy(comm_);
  }
  bool aborted() const { return aborted_.load(); }
  void Abort() {
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  ncclComm_t comm_;
  std::atomic<bool> aborted_{false};
};

class NcclBackend : public Backend {
 public:
  NcclBackend(ncclComm_t comm, int device, std::chrono::milliseconds timeout)
      : handle_(std::make_shared<CommHandle>(comm)),
        comm_(comm),
        device_(device),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device)),
        timeout_(timeout) {}

  c10::DeviceType device_type() const override { return c10::DeviceType::CUDA; }
  int device_index() const override { return device_; }

  absl::StatusOr<Work::Step> AllReduce(at::Tensor& t, ReduceOp op) override {
    return Launch(t, {t}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt,
                           op == ReduceOp::kMax ? ncclMax : ncclSum, comm_, s);
    });
  }
  absl::StatusOr<Work::Step> ReduceScatter(at::Tensor& in, at::Tensor& out, ReduceOp op) override {
    return Launch(in, {in, out}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dt,
                               op == ReduceOp::kMax ? ncclMax : ncclSum, comm_, s);
    });
  }
  absl::StatusOr<Work::Step> AllGather(at::Tensor& in, at::Tensor& out) override {
    return Launch(in, {in, out}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dt, comm_, s);
    });
  }
  absl::StatusOr<Work::Step> Broadcast(at::Tensor& t, int root) override {
    return Launch(t, {t}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), dt, root, comm_, s);
    });
  }
  absl::StatusOr<Work::Step> Barrier() override {
    c10::cuda::CUDAGuard guard(device_);
    at::Tensor one = at::empty({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device_));
    return AllReduce(one, ReduceOp::kSum);
  }

 private:
  template <typename F>
  absl::StatusOr<Work::Step> Launch(const at::Tensor& like, std::vector<at::Tensor> keep, F call) {
    if (handle_->aborted()) {
      return absl::AbortedError("nccl: the communicator was aborted after an earlier failure");
    }
    auto dt = ToNccl(like.scalar_type());
    if (!dt.ok()) return dt.status();
    c10::cuda::CUDAGuard guard(device_);
    cudaStream_t compute = c10::cuda::getCurrentCUDAStream(device_).stream();
    Event ready;
    auto done = std::make_shared<Event>();
    if (ready.status() != cudaSuccess) return CudaError("cudaEventCreate", ready.status());
    if (done->status() != cudaSuccess) return CudaError("cudaEventCreate", done->status());
    cudaError_t e = cudaEventRecord(ready.get(), compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_.stream(), ready.get(), 0);
    if (e != cudaSuccess) return CudaError("ordering the comm stream after compute", e);
    ncclResult_t r = call(*dt, stream_.stream());
    absl::Status enqueued =
        r == ncclSuccess ? absl::OkStatus()
        : r == ncclInProgress
            // A non-blocking communicator may still be enqueuing the kernel: the completion event
            // must not be recorded on the stream before it is there.
            ? PollComm(comm_, timeout_, "enqueue", [] { return true; })
            : NcclError("launch", r, comm_);
    if (enqueued.ok()) {
      e = cudaEventRecord(done->get(), stream_.stream());
      if (e != cudaSuccess) enqueued = CudaError("cudaEventRecord", e);
    }
    if (!enqueued.ok()) {
      handle_->Abort();
      return enqueued;
    }
    // The caching allocator must not hand these buffers out again before the comm stream is done.
    for (const at::Tensor& t : keep) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    }
    return Work::Step([handle = handle_, comm = comm_, done, device = device_, timeout = timeout_,
                       keep = std::move(keep)]() -> absl::Status {
      if (handle->aborted()) {
        return absl::AbortedError("nccl: the communicator was aborted after an earlier failure");
      }
      cudaError_t query = cudaErrorNotReady;
      absl::Status s = PollComm(comm, timeout, "collective", [&] {
        query = cudaEventQuery(done->get());
        return query != cudaErrorNotReady;
      });
      if (s.ok() && query != cudaSuccess) s = CudaError("waiting for the collective", query);
      if (s.ok()) {
        c10::cuda::CUDAGuard guard(device);
        query =
            cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device).stream(), done->get(), 0);
        if (query != cudaSuccess) s = CudaError("ordering compute after the collective", query);
      }
      if (!s.ok()) handle->Abort();  // the group is unusable after this
      return s;
    });
  }

  std::shared_ptr<CommHandle> handle_;
  ncclComm_t comm_;
  int device_;
  c10::cuda::CUDAStream stream_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeNcclBackend(const BackendContext& ctx) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError("nccl: no CUDA device is visible to this process");
  }
  const int device = c10::cuda::current_device();
  ncclUniqueId id;
  try {
    if (ctx.rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return NcclError("ncclGetUniqueId", r, nullptr);
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      ctx.store->set("nccl_unique_id", std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    } else {
      ctx.store->wait({"nccl_unique_id"}, ctx.timeout);
      std::vector<uint8_t> bytes = ctx.store->get("nccl_unique_id");
      if (bytes.size() != sizeof(id)) {
        return absl::DataLossError(absl::StrCat("nccl: unique id from the store has ", bytes.size(),
                                                " bytes, expected ", sizeof(id)));
      }
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
  } catch (const std::exception& e) {
    return StatusFromException(e);
  }
  c10::cuda::CUDAGuard guard(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, ctx.world_size, id, ctx.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = NcclError("ncclCommInitRankConfig", r, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return s;
  }
  absl::Status ready = PollComm(comm, ctx.timeout, "communicator init", [] { return true; });
  if (!ready.ok()) {
    ncclCommAbort(comm);
    return ready;
  }
  return std::unique_ptr<Backend>(new NcclBackend(comm, device, ctx.timeout));
}

}  // namespace zerotrain::comm
