// AsyncFileIO: asynchronous block reads and writes of SwapFiles on a pool of I/O threads, so an
// offloading engine can swap one sub-group while it computes on another.
//
// Why threads and not io_uring or libaio: Debian 12's liburing is not a build dependency here,
// and with O_DIRECT a blocking pread/pwrite per thread keeps the same number of requests at the
// device as an asynchronous ring of that depth. DeepSpeed's aio options keep their meaning:
// thread_count submission lanes with queue_depth requests in flight each; since our calls block,
// each lane is queue_depth threads, thread_count * queue_depth in all, and that many block
// transfers are in flight at most. Buffered (non-O_DIRECT) files do their copy on those threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "offload/swap_file.h"

namespace zerotrain::offload {

// DeepSpeed's "aio" config block, the fields that apply to a thread pool.
struct AioOptions {
  int64_t block_size = 1 << 20;  // bytes per transfer; a multiple of kIoAlignment
  int queue_depth = 8;           // transfers in flight per lane
  int thread_count = 1;          // lanes
};

enum class IoOp { kRead, kWrite };

// One transfer between `buffer` and [offset, offset + bytes) of `file`, which must stay valid
// until the request that carries it has finished.
struct IoBlock {
  const SwapFile* file = nullptr;
  IoOp op = IoOp::kRead;
  int64_t offset = 0;
  void* buffer = nullptr;
  int64_t bytes = 0;
};

namespace internal {
struct IoRequestState;
}

// The handle of a submitted request. Copyable; every copy sees the same request.
class IoHandle {
 public:
  // An already finished, successful request.
  IoHandle() = default;

  // Waits at most `timeout` for the request: its Status once finished (the same on every call),
  // DeadlineExceeded naming it and its progress if it is still running. After DeadlineExceeded
  // the transfers continue and their buffers must stay valid; wait again, or destroy the
  // AsyncFileIO, which waits for the transfers that have started and cancels the rest.
  absl::Status Wait(absl::Duration timeout) const;
  bool done() const;

 private:
  friend class AsyncFileIO;
  explicit IoHandle(std::shared_ptr<internal::IoRequestState> state);
  std::shared_ptr<internal::IoRequestState> state_;
};

class AsyncFileIO {
 public:
  // InvalidArgument, naming the field, for a block_size that is not a positive multiple of
  // kIoAlignment or a queue_depth/thread_count below 1 or above 1024 threads in all.
  static absl::StatusOr<std::unique_ptr<AsyncFileIO>> Create(const AioOptions& options);

  // Cancels the transfers not yet started (their requests fail with Cancelled) and waits for the
  // ones in progress.
  ~AsyncFileIO();
  AsyncFileIO(const AsyncFileIO&) = delete;
  AsyncFileIO& operator=(const AsyncFileIO&) = delete;

  // Queues `blocks` as one request (first in, first started). Every block is checked before any
  // is queued: an invalid one fails the call and queues nothing. `description` ("swap-in of
  // 'rank0.exp_avg'") opens every error of the request. `on_success` runs on an I/O thread after
  // the last block succeeded and before waiters wake; its error becomes the request's.
  absl::StatusOr<IoHandle> Submit(std::string description, std::vector<IoBlock> blocks,
                                  std::function<absl::Status()> on_success = nullptr);

  // [offset, offset + bytes) of `file` <-> `buffer`, cut into block_size transfers.
  std::vector<IoBlock> SplitIntoBlocks(const SwapFile& file, IoOp op, int64_t offset, void* buffer,
                                       int64_t bytes) const;

  const AioOptions& options() const { return options_; }
  int io_threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct Impl;
  AioOptions options_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;

  explicit AsyncFileIO(const AioOptions& options);
  void WorkerLoop();
};

}  // namespace zerotrain::offload
