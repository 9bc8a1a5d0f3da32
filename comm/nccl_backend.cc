// NCCL backend (built under --config=cuda): CUDA tensors over NCCL on a stream of its own. Each op
// waits for the compute stream's work so far (an event), runs on the comm stream, and the compute
// stream waits for its completion event when the op is waited on, on the host (Wait) or only on the
// stream (WaitOnStream). NCCL's unique id travels through the group's store; the communicator is
// non-blocking so init and ops can be bounded, and a watchdog thread aborts it when an op outlives
// the timeout or NCCL reports an error, even if nobody waits on the host: the abort ends the stuck
// kernels, so neither the device streams nor a host blocked behind them hang (peers stuck in the
// same op end through their own timeouts). Not yet run on a GPU (docs/ENGINE.md).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
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

// The communicator, shared with in-flight steps and the watchdog. Every NCCL call on it runs under
// one mutex, so the first failure's abort (which also frees peers blocked in the op) never races a
// call from another thread; after it every use is refused with the reason.
class CommHandle {
 public:
  explicit CommHandle(ncclComm_t comm) : comm_(comm) {}
  ~CommHandle() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) ncclCommDestroy(comm_);
  }
  bool aborted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  void Abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
    ncclCommAbort(comm_);
  }
  // Runs call(comm) unless the communicator was aborted; that error otherwise.
  template <typename F>
  absl::StatusOr<ncclResult_t> Run(F call) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return AbortedLocked();
    return call(comm_);
  }
  // NCCL's asynchronous error state, with its last-error text when it is one.
  absl::Status AsyncError(const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return AbortedLocked();
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async == ncclSuccess) return absl::OkStatus();
    if (async == ncclInProgress) return absl::UnavailableError("in progress");
    return NcclError(what, async, comm_);
  }

 private:
  absl::Status AbortedLocked() const {
    return absl::AbortedError(absl::StrCat("nccl: the communicator was aborted: ", reason_));
  }
  mutable std::mutex mu_;
  ncclComm_t comm_;
  bool aborted_ = false;
  std::string reason_;
};

// Polls the communicator until `done` holds, an async error shows up, or time runs out.
template <typename Done>
absl::Status PollComm(CommHandle& handle, std::chrono::milliseconds timeout, const char* what,
                      Done done) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    absl::Status async = handle.AsyncError(what);
    const bool in_progress = absl::IsUnavailable(async);
    if (!async.ok() && !in_progress) return async;
    if (async.ok() && done()) return absl::OkStatus();
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("nccl: ", what, " timed out after ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Watches every launched op's completion event in launch order (one stream: they finish in
// order) and aborts the communicator when the oldest is past its deadline, an event reports an
// error, or NCCL an asynchronous one.
class Watchdog {
 public:
  Watchdog(std::shared_ptr<CommHandle> handle, int device, std::chrono::milliseconds timeout)
      : handle_(std::move(handle)),
        device_(device),
        timeout_(timeout),
        thread_([this] { Run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Watch(std::shared_ptr<Event> done) {
    std::lock_guard<std::mutex> lock(mu_);
    watched_.push_back({std::move(done), Clock::now() + timeout_});
  }

 private:
  struct Entry {
    std::shared_ptr<Event> done;
    Clock::time_point deadline;
  };
  void Run() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return stop_; })) {
      std::string failure;
      while (!watched_.empty() && failure.empty()) {
        const cudaError_t q = cudaEventQuery(watched_.front().done->get());
        if (q == cudaSuccess) {
          watched_.pop_front();
        } else if (q != cudaErrorNotReady) {
          failure = absl::StrCat("a collective's completion event failed: ", cudaGetErrorString(q));
        } else if (Clock::now() > watched_.front().deadline) {
          failure = absl::StrCat("a collective did not finish within ", timeout_.count(), " ms");
        } else {
          break;
        }
      }
      if (failure.empty() && !watched_.empty()) {
        absl::Status async = handle_->AsyncError("collective");
        if (!async.ok() && !absl::IsUnavailable(async)) failure = std::string(async.message());
      }
      if (failure.empty()) continue;
      watched_.clear();
      std::cerr << "nccl watchdog: " << failure << "; aborting the communicator\n";
      handle_->Abort(absl::StrCat("watchdog: ", failure));
    }
  }

  std::shared_ptr<CommHandle> handle_;
  int device_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<Entry> watched_;
  std::thread thread_;  // last: started once the rest exists
};

class NcclBackend : public Backend {
 public:
  NcclBackend(std::shared_ptr<CommHandle> handle, ncclComm_t comm, int device,
              std::chrono::milliseconds timeout)
      : handle_(std::move(handle)),
        comm_(comm),
        device_(device),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device)),
        timeout_(timeout),
        watchdog_(std::make_unique<Watchdog>(handle_, device, timeout)) {}

  c10::DeviceType device_type() const override { return c10::DeviceType::CUDA; }
  int device_index() const override { return device_; }

  absl::StatusOr<Transfer> AllReduce(at::Tensor& t, ReduceOp op) override {
    return Launch(t, {t}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt,
                           op == ReduceOp::kMax ? ncclMax : ncclSum, comm_, s);
    });
  }
  absl::StatusOr<Transfer> ReduceScatter(at::Tensor& in, at::Tensor& out, ReduceOp op) override {
    return Launch(in, {in, out}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dt,
                               op == ReduceOp::kMax ? ncclMax : ncclSum, comm_, s);
    });
  }
  absl::StatusOr<Transfer> AllGather(at::Tensor& in, at::Tensor& out) override {
    return Launch(in, {in, out}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dt, comm_, s);
    });
  }
  absl::StatusOr<Transfer> Broadcast(at::Tensor& t, int root) override {
    return Launch(t, {t}, [&](ncclDataType_t dt, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), dt, root, comm_, s);
    });
  }
  absl::StatusOr<Transfer> Barrier() override {
    c10::cuda::CUDAGuard guard(device_);
    at::Tensor one = at::empty({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device_));
    return AllReduce(one, ReduceOp::kSum);
  }

 private:
  template <typename F>
  absl::StatusOr<Transfer> Launch(const at::Tensor& like, std::vector<at::Tensor> keep, F call) {
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
    absl::StatusOr<ncclResult_t> r =
        handle_->Run([&](ncclComm_t) { return call(*dt, stream_.stream()); });
    if (!r.ok()) return r.status();
    absl::Status enqueued =
        *r == ncclSuccess ? absl::OkStatus()
        : *r == ncclInProgress
            // A non-blocking communicator may still be enqueuing the kernel: the completion event
            // must not be recorded on the stream before it is there.
            ? PollComm(*handle_, timeout_, "enqueue", [] { return true; })
            : handle_->AsyncError("launch");
    if (enqueued.ok() && *r != ncclSuccess && *r != ncclInProgress) {
      enqueued = absl::AbortedError(absl::StrCat("nccl: launch: ", ncclGetErrorString(*r)));
    }
    if (enqueued.ok()) {
      e = cudaEventRecord(done->get(), stream_.stream());
      if (e != cudaSuccess) enqueued = CudaError("cudaEventRecord", e);
    }
    if (!enqueued.ok()) {
      handle_->Abort(std::string(enqueued.message()));
      return enqueued;
    }
    watchdog_->Watch(done);
    // The caching allocator must not hand these buffers out again before the comm stream is done.
    for (const at::Tensor& t : keep) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    }
    // Either form orders the caller's current stream after the transfer; only `wait` blocks the
    // host, polling the event so a stuck or failed peer surfaces within the timeout.
    auto order = [handle = handle_, done, device = device_]() -> absl::Status {
      c10::cuda::CUDAGuard guard(device);
      cudaError_t e =
          cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device).stream(), done->get(), 0);
      if (e == cudaSuccess) return absl::OkStatus();
      absl::Status s = CudaError("ordering compute after the collective", e);
      handle->Abort(std::string(s.message()));
      return s;
    };
    // The host check holds no tensor: recordStream above already keeps the allocator from reusing
    // them, and a check deferred by WaitOnStream (ZeRO stage 3 keeps its gathers' checks until the
    // iteration ends) must not keep a released buffer alive.
    Work::Step wait = [handle = handle_, done, timeout = timeout_, order]() -> absl::Status {
      cudaError_t query = cudaErrorNotReady;
      absl::Status s = PollComm(*handle, timeout, "collective", [&] {
        query = cudaEventQuery(done->get());
        return query != cudaErrorNotReady;
      });
      if (s.ok() && query != cudaSuccess) s = CudaError("waiting for the collective", query);
      if (s.ok()) return order();
      handle->Abort(std::string(s.message()));  // the group is unusable after this
      return s;
    };
    return Transfer{std::move(wait), std::move(order)};
  }

  std::shared_ptr<CommHandle> handle_;
  ncclComm_t comm_;
  int device_;
  c10::cuda::CUDAStream stream_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Watchdog> watchdog_;
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
  auto handle = std::make_shared<CommHandle>(comm);
  absl::Status ready = PollComm(*handle, ctx.timeout, "communicator init", [] { return true; });
  if (!ready.ok()) {
    handle->Abort(std::string(ready.message()));
    return ready;
  }
  return std::unique_ptr<Backend>(new NcclBackend(std::move(handle), comm, device, ctx.timeout));
}

}  // namespace zerotrain::comm
