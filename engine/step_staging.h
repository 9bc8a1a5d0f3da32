// StepStaging: the optimizer's view of tensors that live on another device than its state. With
// offload_optimizer from a GPU the fp32 master and the optimizer states are in host memory while
// the reduced gradients and the low-precision parameters are on the device: each step the
// gradients are copied into pinned host blocks on the transfer stream, and the optimizer writes
// the new parameters into pinned blocks that are then copied back. A block goes back to the pool
// only after its copy's fence. Where a tensor already lives on the state's device (every CPU
// engine, and a GPU engine without optimizer offload) In and Out hand back the tensor itself and
// nothing is copied.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/comm.h"
#include "engine/device_runtime.h"
#include "offload/pinned_host_pool.h"
#include "offload/transfer_stream.h"

namespace zerotrain::engine {

class StepStaging {
 public:
  // `state` is the runtime of the optimizer state's memory; `transfer` copies between it and the
  // model's device; `pool` holds host buffers; `copies` counts the bytes moved between host and
  // device (the engine's traffic()).
  StepStaging(const DeviceRuntime* state, offload::TransferStream* transfer,
              offload::PinnedHostPool* pool, absl::Duration timeout,
              comm::HostDeviceCopies* copies);
  ~StepStaging();

  // What the optimizer reads for `t` (1-D, contiguous): t itself on the state's device, else a
  // copy there whose transfer has started (WaitInputs before reading it). A tensor already
  // started this step (StartIn) is not copied again.
  absl::StatusOr<at::Tensor> In(const at::Tensor& t);
  // In, from the reducer while backward still runs (the gradients of a bucket are final); an
  // error is kept for WaitInputs.
  void StartIn(const at::Tensor& t);
  absl::Status WaitInputs();
  // Drops what this step started (a skipped or failed step), once the copies have finished.
  absl::Status Reset();
  // Where the optimizer writes t's new values: t itself, or a buffer Publish copies into t.
  absl::StatusOr<at::Tensor> Out(const at::Tensor& t);
  // Copies every Out buffer into its tensor: later work on the current stream follows the copies,
  // and a tensor in host memory has its values when Publish returns.
  absl::Status Publish();

 private:
  struct Staged {
    at::Tensor target;  // the caller's tensor
    at::Tensor buffer;  // on the state's device
    offload::Fence fence;
  };
  absl::StatusOr<at::Tensor> Buffer(const at::Tensor& like);
  // Waits for the copies of the last Publish and the inputs' fences, then frees their buffers.
  absl::Status Retire();

  const DeviceRuntime* state_;
  offload::TransferStream* transfer_;
  offload::PinnedHostPool* pool_;
  absl::Duration timeout_;
  comm::HostDeviceCopies* copies_;
  std::vector<Staged> inputs_, outputs_, retiring_;
  absl::Status early_error_;  // of a StartIn
};

}  // namespace zerotrain::engine
