// The transport under a ProcessGroup: exact-size collectives on one device type. ProcessGroup
// does validation, padding, averaging and error context; a backend only launches and waits.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/types.h"
#include "comm/work.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace zerotrain::comm {

struct BackendContext {
  c10::intrusive_ptr<c10d::Store> store;  // already prefixed for this backend's use
  int rank = 0;
  int world_size = 1;
  std::string master_addr;
  std::chrono::milliseconds timeout{0};
  int gloo_threads = 2;
};

// What a launch hands back: `wait` blocks the host (bounded by the timeout) until the transfer
// is done or failed; `order_stream`, only where the transfer runs on a device stream (NCCL),
// makes the caller's current stream wait for it without blocking the host (Work::WaitOnStream).
struct Transfer {
  Work::Step wait;
  Work::Step order_stream = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual c10::DeviceType device_type() const = 0;
  // The one device the backend's tensors must be on, or -1 when any device of the type will do.
  virtual int device_index() const { return -1; }
  // Each returns how to wait for the launched transfer.
  // `op` is kSum or kMax; averaging is done by the caller.
  virtual absl::StatusOr<Transfer> AllReduce(at::Tensor& tensor, ReduceOp op) = 0;
  // input.numel() == output.numel() * world_size.
  virtual absl::StatusOr<Transfer> ReduceScatter(at::Tensor& input, at::Tensor& output,
                                                 ReduceOp op) = 0;
  // output.numel() == input.numel() * world_size; output is contiguous, or, where
  // gathers_into_rows(), may be a [world_size, input.numel()] tensor with contiguous rows.
  virtual absl::StatusOr<Transfer> AllGather(at::Tensor& input, at::Tensor& output) = 0;
  virtual bool gathers_into_rows() const { return false; }
  // Whether ReduceScatter is an all-reduce of a full copy of its input (c10d's Gloo): a caller
  // whose input is scratch then saves that copy, and the output buffer, by all-reducing in place.
  virtual bool reduce_scatter_copies_input() const { return false; }
  // input.numel() == output.numel(), a multiple of world_size: block j of the input goes to rank
  // j, block r of the output comes from rank r. By default an all-gather of every input, of
  // which each rank keeps its blocks: world_size times the bytes, for transports that move bytes
  // cheaply (shared memory) or have no exchange of their own.
  virtual absl::StatusOr<Transfer> AllToAll(at::Tensor& input, at::Tensor& output, int rank,
                                            int world_size);
  virtual absl::StatusOr<Transfer> Broadcast(at::Tensor& tensor, int root) = 0;
  virtual absl::StatusOr<Transfer> Barrier() = 0;
};

// CPU tensors over TCP, on the Gloo that LibTorch carries (c10d::ProcessGroupGloo).
absl::StatusOr<std::unique_ptr<Backend>> MakeGlooBackend(const BackendContext& ctx);

// CPU tensors through shared memory, for ranks that all run on one host (comm/shm_backend.cc).
absl::StatusOr<std::unique_ptr<Backend>> MakeShmBackend(const BackendContext& ctx);

// CUDA tensors over NCCL on a stream of its own; an error when built without --config=cuda.
absl::StatusOr<std::unique_ptr<Backend>> MakeNcclBackend(const BackendContext& ctx);

// LibTorch and Gloo report failures as exceptions: this turns one into a Status without the C++
// backtrace c10::Error carries. Timeouts become DeadlineExceeded, the rest Aborted.
absl::Status StatusFromException(const std::exception& e);

}  // namespace zerotrain::comm
