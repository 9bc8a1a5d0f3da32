// DeviceRuntime: the one seam between the engine and the kind of memory it computes in. What
// differs between host memory and a CUDA device (kernels, the step's clock, staging buffers,
// page-locking, the generators a checkpoint keeps) is asked of a runtime chosen once, at
// Engine::Create, for each memory the engine uses: the model's device, and the optimizer state's
// (host memory when offload_optimizer moves it there). No other engine code asks a tensor or a
// device whether it is on the host, except StepClock::ForDevice, which MakeClock calls.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/grad_stats.h"
#include "engine/step_clock.h"
#include "offload/pinned_host_pool.h"
#include "optim/adam.h"

namespace zerotrain::engine {

class DeviceRuntime {
 public:
  // The runtime of `device`: the host (cpu), or a CUDA device, whose index is filled in from the
  // current device when `device` names none, so that device comparisons are exact. Another device
  // type is InvalidArgument.
  static absl::StatusOr<std::unique_ptr<DeviceRuntime>> For(c10::Device device);
  // The host's runtime, for state that is given none (a ShardState built by hand).
  static const DeviceRuntime& Host();
  virtual ~DeviceRuntime() = default;

  c10::Device device() const { return device_; }

  // Whether copies between this device and host memory run faster, and asynchronously, from
  // page-locked host memory; the host copies only within itself and gains nothing.
  virtual bool CopiesFromPinnedHost() const = 0;
  // The step's phase clock: host time, or events on the device's current stream.
  virtual std::unique_ptr<StepClock> MakeClock() const = 0;
  // [overflow, sum of squares] of gradients that all live here (grad_stats.h).
  virtual absl::StatusOr<at::Tensor> GradStats(const std::vector<at::Tensor>& grads,
                                               const GradStatsRequest& request) const = 0;
  // A 1-D buffer of `like`'s size and dtype here, for one step's staged copy: device memory, or
  // a block of `pool` (page-locked when the pool pins) returned to it when the tensor dies.
  virtual absl::StatusOr<at::Tensor> Buffer(const at::Tensor& like,
                                            offload::PinnedHostPool* pool) const = 0;
  // Adam/AdamW over optimizer state held here, with the kernel for this memory.
  virtual absl::Status AdamStep(const optim::AdamOptions& options, int64_t step,
                                absl::Span<const optim::AdamShard> shards) const = 0;
  // Whether optim's host-only kernels (SGD, Adagrad, LAMB) can step state held here.
  virtual bool RunsHostKernels() const = 0;
  // The CUDA devices whose generators a checkpoint keeps: this device, and the current CUDA
  // device (a host engine's model may still run on a GPU). None where CUDA is not available.
  virtual absl::StatusOr<std::vector<c10::Device>> RngDevices() const = 0;

 protected:
  explicit DeviceRuntime(c10::Device device) : device_(device) {}

 private:
  c10::Device device_;
};

}  // namespace zerotrain::engine
