// run.device and run.dist_backend against the visible GPUs (device_placement.h).
#include "trainer/device_placement.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::trainer {
namespace {

const char* DeviceRequestName(DeviceRequest d) {
  switch (d) {
    case DeviceRequest::kCuda:
      return "cuda";
    case DeviceRequest::kCpu:
      return "cpu";
    case DeviceRequest::kAuto:
      break;
  }
  return "auto";
}

// Why this process cannot use CUDA, for the messages; "" when it can.
std::string NoCudaReason(const CudaDevices& cuda) {
  if (!cuda.built) return "this binary was built without CUDA: build it with --config=cuda";
  if (cuda.visible == 0) {
    return "no CUDA device is visible: check the driver, nvidia-smi and CUDA_VISIBLE_DEVICES";
  }
  return "";
}

std::string Gpus(int n) { return absl::StrCat(n, n == 1 ? " visible GPU" : " visible GPUs"); }

}  // namespace

CudaDevices VisibleCudaDevices() {
  CudaDevices out;
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  out.built = hooks.isBuilt();
  // deviceCount() reports a broken driver as 0 devices (with a LibTorch warning), which is what
  // the placement wants: no usable GPU.
  if (out.built) out.visible = hooks.deviceCount();
  return out;
}

absl::StatusOr<Placement> ResolvePlacement(const RunOptions& run, int local_rank,
                                           int local_world_size, const CudaDevices& cuda) {
  if (local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("LOCAL_RANK = ", local_rank, ": negative"));
  }
  const std::string no_cuda = NoCudaReason(cuda);
  bool on_cuda = false;
  switch (run.device) {
    case DeviceRequest::kCpu:
      break;
    case DeviceRequest::kCuda:
      if (!no_cuda.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("run.device = \"cuda\": ", no_cuda, "; or set run.device \"cpu\""));
      }
      on_cuda = true;
      break;
    case DeviceRequest::kAuto:
      on_cuda = no_cuda.empty();
      break;
  }
  Placement p;
  // "auto" on CUDA: NCCL when every rank of the node has a GPU of its own, else Gloo, whose ranks
  // share GPUs (so the default run works on a one-GPU machine). Only a known node size decides
  // that, so all its ranks choose alike; without one, NCCL.
  const bool gpu_each = local_world_size == 0 || local_world_size <= cuda.visible;
  p.backend = run.dist_backend.value_or(on_cuda && gpu_each ? comm::BackendKind::kNccl
                                                            : comm::BackendKind::kGloo);
  const std::string backend_field =
      !run.dist_backend.has_value()
          ? std::string("run.dist_backend = \"auto\" (nccl on CUDA)")
          : absl::StrCat("run.dist_backend = \"", DistBackendName(run.dist_backend), "\"");
  if (!on_cuda) {
    if (p.backend == comm::BackendKind::kNccl) {
      // ValidateConfig has refused nccl with run.device "cpu"; here "auto" found no GPU.
      return absl::InvalidArgumentError(absl::StrCat(
          backend_field, ": NCCL needs a GPU, and run.device = \"", DeviceRequestName(run.device),
          "\" found none (", no_cuda.empty() ? "run.device is cpu" : no_cuda,
          "); set run.dist_backend \"gloo\" or \"shm\" for CPU ranks"));
    }
    return p;
  }
  if (p.backend == comm::BackendKind::kNccl) {
    const int ranks = local_world_size > 0 ? local_world_size : local_rank + 1;
    if (ranks > cuda.visible) {
      return absl::InvalidArgumentError(absl::StrCat(
          backend_field, ": ",
          local_world_size > 0 ? absl::StrCat(ranks, " ranks on this node")
                               : absl::StrCat("LOCAL_RANK ", local_rank),
          " but ", Gpus(cuda.visible),
          " (each rank uses cuda:LOCAL_RANK): NCCL refuses two ranks on one GPU; start at most ",
          cuda.visible,
          " rank(s) per node, or set run.dist_backend \"gloo\" or \"shm\", which "
          "let ranks share a GPU (slower)"));
    }
    p.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
    return p;
  }
  p.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % cuda.visible));
  return p;
}

absl::StatusOr<int> LocalWorldSizeFromEnv(const std::function<const char*(const char*)>& env) {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    const char* value = env(name);
    if (value == nullptr) continue;
    int n = 0;
    if (!absl::SimpleAtoi(value, &n) || n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " = \"", value, "\": expected a positive number of ranks"));
    }
    return n;
  }
  // Slurm writes "2(x3)" or "2,1" for uneven nodes; only a plain number says this node's count.
  // srun sets the step's count; --ntasks-per-node the job's.
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"}) {
    const char* value = env(name);
    int n = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &n) && n > 0) return n;
  }
  return 0;
}

absl::StatusOr<int> LocalWorldSizeFromEnv() {
  return LocalWorldSizeFromEnv([](const char* name) { return std::getenv(name); });
}

absl::Status UseDevice(const c10::Device& device) {
  if (!device.is_cuda()) return absl::OkStatus();
  try {
    // The registry's CUDA entry is c10_cuda's guard, whose setDevice is c10::cuda::set_device;
    // CUDAHooksInterface::setCurrentDevice is not implemented for CUDA.
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(device);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(
        "making ", device.str(), " the current CUDA device: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::trainer
