// AsyncFileIO: one FIFO of block transfers shared by the I/O threads; a request is done when its
// last block has run, and the first failing block's error is the request's.
#include "offload/async_file_io.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zerotrain::offload {
namespace internal {

struct IoRequestState {
  std::string description;
  std::function<absl::Status()> on_success;
  int64_t total = 0;

  // std::mutex rather than absl::Mutex so that ThreadSanitizer sees the locking (Debian's Abseil
  // is not built for it). mu guards the fields below; cv signals `done`.
  mutable std::mutex mu;
  std::condition_variable cv;
  int64_t remaining = 0;
  int64_t succeeded = 0;
  absl::Status result;
  bool done = false;

  absl::Status WithContext(const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat(description, ": ", s.message()));
  }

  bool Failed() const {
    std::lock_guard<std::mutex> lock(mu);
    return !result.ok();
  }

  // Records one block's outcome; the last one runs on_success and wakes the waiters.
  void Finish(const absl::Status& s) {
    absl::Status final_result;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok() && result.ok()) result = WithContext(s);
      if (s.ok()) ++succeeded;
      if (--remaining > 0) return;
      final_result = result;
    }
    // Outside the lock: on_success may take a while (a copy out of a bounce buffer) and waiters
    // polling done() must not stall behind it.
    if (final_result.ok() && on_success) {
      absl::Status c = on_success();
      if (!c.ok()) final_result = WithContext(c);
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      result = final_result;
      done = true;
    }
    cv.notify_all();
  }
};

}  // namespace internal

struct AsyncFileIO::Impl {
  struct Pending {
    std::shared_ptr<internal::IoRequestState> request;
    IoBlock block;
  };
  std::mutex mu;  // guards queue and stopping; cv signals either changing
  std::condition_variable cv;
  std::deque<Pending> queue;
  bool stopping = false;
};

IoHandle::IoHandle(std::shared_ptr<internal::IoRequestState> state) : state_(std::move(state)) {}

absl::Status IoHandle::Wait(absl::Duration timeout) const {
  if (state_ == nullptr) return absl::OkStatus();
  internal::IoRequestState& r = *state_;
  // Clamped so that the deadline arithmetic cannot overflow; ten years is a hang by any measure.
  const absl::Duration bounded =
      std::clamp(timeout, absl::ZeroDuration(), absl::Hours(24 * 365 * 10));
  std::unique_lock<std::mutex> lock(r.mu);
  if (!r.cv.wait_for(lock, absl::ToChronoNanoseconds(bounded), [&r] { return r.done; })) {
    return absl::DeadlineExceededError(
        absl::StrCat(r.description, ": not finished after ", absl::FormatDuration(timeout), " (",
                     r.succeeded, " of ", r.total,
                     " transfers done); the transfers continue and their buffers must stay "
                     "valid"));
  }
  return r.result;
}

bool IoHandle::done() const {
  if (state_ == nullptr) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

AsyncFileIO::AsyncFileIO(const AioOptions& options)
    : options_(options), impl_(std::make_unique<Impl>()) {}

absl::StatusOr<std::unique_ptr<AsyncFileIO>> AsyncFileIO::Create(const AioOptions& options) {
  if (options.block_size <= 0 || options.block_size % kIoAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("AsyncFileIO: aio.block_size must be a ",
                                                   "positive multiple of ", kIoAlignment, ", got ",
                                                   options.block_size));
  }
  if (options.queue_depth < 1 || options.thread_count < 1 ||
      int64_t{options.queue_depth} * options.thread_count > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AsyncFileIO: aio.queue_depth (", options.queue_depth, ") and aio.thread_count (",
        options.thread_count, ") must be >= 1, with at most 1024 transfers in flight"));
  }
  std::unique_ptr<AsyncFileIO> io(new AsyncFileIO(options));
  const int n = options.queue_depth * options.thread_count;
  for (int i = 0; i < n; ++i) io->threads_.emplace_back([p = io.get()] { p->WorkerLoop(); });
  return io;
}

AsyncFileIO::~AsyncFileIO() {
  std::deque<Impl::Pending> cancelled;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    cancelled.swap(impl_->queue);
  }
  impl_->cv.notify_all();
  for (Impl::Pending& p : cancelled) {
    p.request->Finish(absl::CancelledError(
        absl::StrCat("AsyncFileIO destroyed before the transfer at offset ", p.block.offset, " of ",
                     p.block.file->path(), " started")));
  }
  for (std::thread& t : threads_) t.join();
}

void AsyncFileIO::WorkerLoop() {
  for (;;) {
    Impl::Pending p;
    {
      std::unique_lock<std::mutex> lock(impl_->mu);
      impl_->cv.wait(lock, [this] { return impl_->stopping || !impl_->queue.empty(); });
      if (impl_->queue.empty()) return;  // stopping
      p = std::move(impl_->queue.front());
      impl_->queue.pop_front();
    }
    // Once a block of a request has failed the request has failed: its other blocks are skipped
    // rather than spending disk time on a result nobody can use.
    absl::Status s;
    if (!p.request->Failed()) {
      const IoBlock& b = p.block;
      s = b.op == IoOp::kRead ? b.file->Read(b.offset, b.buffer, b.bytes)
                              : b.file->Write(b.offset, b.buffer, b.bytes);
    }
    p.request->Finish(s);
  }
}

absl::StatusOr<IoHandle> AsyncFileIO::Submit(std::string description, std::vector<IoBlock> blocks,
                                             std::function<absl::Status()> on_success) {
  if (blocks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(description, ": no blocks to transfer"));
  }
  for (const IoBlock& b : blocks) {
    if (b.file == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(description, ": a block has no file"));
    }
    absl::Status s =
        b.file->CheckRange(b.op == IoOp::kRead ? "read" : "write", b.offset, b.buffer, b.bytes);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(description, ": ", s.message()));
  }
  auto state = std::make_shared<internal::IoRequestState>();
  state->description = std::move(description);
  state->on_success = std::move(on_success);
  state->total = static_cast<int64_t>(blocks.size());
  state->remaining = state->total;  // not yet shared with any thread
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) {
      return absl::FailedPreconditionError(
          absl::StrCat(state->description, ": AsyncFileIO is shutting down"));
    }
    for (const IoBlock& b : blocks) impl_->queue.push_back({state, b});
  }
  impl_->cv.notify_all();
  return IoHandle(std::move(state));
}

std::vector<IoBlock> AsyncFileIO::SplitIntoBlocks(const SwapFile& file, IoOp op, int64_t offset,
                                                  void* buffer, int64_t bytes) const {
  std::vector<IoBlock> blocks;
  for (int64_t done = 0; done < bytes; done += options_.block_size) {
    blocks.push_back({&file, op, offset + done, static_cast<char*>(buffer) + done,
                      std::min(options_.block_size, bytes - done)});
  }
  return blocks;
}

}  // namespace zerotrain::offload
