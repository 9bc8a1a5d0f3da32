// The host's and CUDA's DeviceRuntime. Both build without CUDA: the CUDA kernels come from
// optim/, which answers Unimplemented in a build without --config=cuda, and the CUDA runtime
// is only chosen for a cuda device, which such a build cannot reach (moving the model there fails
// first, with LibTorch's message).
#include "engine/device_runtime.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "optim/fused_adam_cuda.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

absl::Status CheckAllOn(const std::vector<at::Tensor>& grads, c10::Device device) {
  for (const at::Tensor& g : grads) {
    if (g.device() != device) {
      return absl::InvalidArgumentError(absl::StrCat("gradient statistics on ", device.str(),
                                                     ": a shard is on ", g.device().str()));
    }
  }
  return absl::OkStatus();
}

class HostRuntime : public DeviceRuntime {
 public:
  HostRuntime() : DeviceRuntime(c10::Device(c10::kCPU)) {}
  bool CopiesFromPinnedHost() const override { return false; }
  std::unique_ptr<StepClock> MakeClock() const override { return StepClock::ForDevice(device()); }
  absl::StatusOr<at::Tensor> GradStats(const std::vector<at::Tensor>& grads,
                                       const GradStatsRequest& request) const override {
    ZT_RETURN_IF_ERROR(CheckAllOn(grads, device()));
    return HostGradStats(grads, request);
  }
  absl::StatusOr<at::Tensor> Buffer(const at::Tensor& like,
                                    offload::PinnedHostPool* pool) const override {
    ZT_ASSIGN_OR_RETURN(offload::HostBlock block, pool->Allocate(like.nbytes()));
    auto owner = std::make_shared<offload::HostBlock>(std::move(block));
    void* data = owner->data();
    try {
      return at::from_blob(
          data, {like.numel()}, [owner](void*) mutable { owner.reset(); },
          at::TensorOptions().dtype(like.scalar_type()));
    } catch (const c10::Error& e) {
      return absl::InternalError(e.what_without_backtrace());
    }
  }
  absl::Status AdamStep(const optim::AdamOptions& options, int64_t step,
                        absl::Span<const optim::AdamShard> shards) const override {
    return optim::FusedAdamStep(options, step, shards);
  }
  bool RunsHostKernels() const override { return true; }
  absl::StatusOr<std::vector<c10::Device>> RngDevices() const override {
    std::vector<c10::Device> out;
    ZT_ASSIGN_OR_RETURN(const c10::DeviceIndex current, CurrentCudaDevice());
    if (current >= 0) out.emplace_back(c10::kCUDA, current);
    return out;
  }

  // The current CUDA device, or -1 where CUDA is not available at runtime (also in a binary
  // built without LibTorch's CUDA libraries).
  static absl::StatusOr<c10::DeviceIndex> CurrentCudaDevice() {
    try {
      if (!at::globalContext().hasCUDA()) return -1;
      return at::detail::getCUDAHooks().current_device();
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("CUDA devices for the RNG states: ", e.what_without_backtrace()));
    }
  }
};

class CudaRuntime : public DeviceRuntime {
 public:
  explicit CudaRuntime(c10::Device device) : DeviceRuntime(device) {}
  bool CopiesFromPinnedHost() const override { return true; }
  std::unique_ptr<StepClock> MakeClock() const override { return StepClock::ForDevice(device()); }
  absl::StatusOr<at::Tensor> GradStats(const std::vector<at::Tensor>& grads,
                                       const GradStatsRequest& request) const override {
    ZT_RETURN_IF_ERROR(CheckAllOn(grads, device()));
    try {
      return AtenGradStats(grads, request, device());
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("gradient statistics on ", device().str(), ": ",
                                              e.what_without_backtrace()));
    }
  }
  absl::StatusOr<at::Tensor> Buffer(const at::Tensor& like,
                                    offload::PinnedHostPool*) const override {
    try {
      return at::empty({like.numel()}, like.options().device(device()));
    } catch (const c10::Error& e) {  // the caller names the buffer, its size and device
      return absl::ResourceExhaustedError(e.what_without_backtrace());
    }
  }
  absl::Status AdamStep(const optim::AdamOptions& options, int64_t step,
                        absl::Span<const optim::AdamShard> shards) const override {
    return optim::FusedAdamStepCuda(options, step, shards);
  }
  bool RunsHostKernels() const override { return false; }
  absl::StatusOr<std::vector<c10::Device>> RngDevices() const override {
    ZT_ASSIGN_OR_RETURN(const c10::DeviceIndex current, HostRuntime::CurrentCudaDevice());
    std::vector<c10::Device> out = {
        c10::Device(c10::kCUDA, device().has_index() ? device().index() : current)};
    if (current >= 0 && current != out[0].index()) out.emplace_back(c10::kCUDA, current);
    return out;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRuntime>> DeviceRuntime::For(c10::Device device) {
  switch (device.type()) {
    case c10::DeviceType::CPU:
      return std::make_unique<HostRuntime>();
    case c10::DeviceType::CUDA:
      if (!device.has_index()) {
        try {
          device = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
        } catch (const c10::Error&) {
          // No CUDA in this build: the engine's first move of the model there fails, with
          // LibTorch's own message.
        }
      }
      return std::make_unique<CudaRuntime>(device);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device.str(), " (the engine runs on cpu or cuda)"));
  }
}

const DeviceRuntime& DeviceRuntime::Host() {
  static const HostRuntime* const host = new HostRuntime();
  return *host;
}

}  // namespace zerotrain::engine
