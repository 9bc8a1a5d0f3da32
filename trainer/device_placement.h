// Where a rank trains and over which transport: run.device and run.dist_backend resolved against
// the rank's LOCAL_RANK and the GPUs the process sees. Resolved where LOCAL_RANK is known (our
// launcher for its whole node, each rank of another launcher for itself) and before any
// rendezvous, so a placement that cannot work fails at once with one line naming the field,
// instead of inside NCCL or with the other ranks waiting for the timeout. Compiles and links in
// CPU-only builds too: the CUDA calls go through LibTorch's hooks, which answer "no CUDA" there.
#pragma once

#include <c10/core/Device.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {

struct CudaDevices {
  bool built = false;  // the binary links LibTorch's CUDA libraries (--config=cuda)
  int visible = 0;     // devices this process may use (CUDA_VISIBLE_DEVICES applies)
};

// This process's view. Initialises the CUDA driver when it is built in (no device context).
CudaDevices VisibleCudaDevices();

struct Placement {
  c10::Device device = c10::Device(c10::kCPU);
  comm::BackendKind backend = comm::BackendKind::kGloo;
};

// The device for the rank with `local_rank` among `local_world_size` ranks on its node (0 =
// unknown: then only this rank's own device is checked). CUDA ranks use cuda:LOCAL_RANK, or with
// Gloo and shm, which let ranks share a GPU, cuda:(LOCAL_RANK mod the visible GPUs).
// dist_backend "auto" is NCCL on CUDA when each of the node's ranks has a GPU, else Gloo.
// InvalidArgument, naming run.device or run.dist_backend and its value: "cuda" with no visible
// GPU; NCCL on the CPU; NCCL with more ranks on the node than visible GPUs.
absl::StatusOr<Placement> ResolvePlacement(const RunOptions& run, int local_rank,
                                           int local_world_size, const CudaDevices& cuda);

// The number of ranks on this node as the job's launcher set it: LOCAL_WORLD_SIZE (torchrun and
// ours), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI) or SLURM_NTASKS_PER_NODE (Slurm, when a plain
// number); 0 when none is set. A malformed value is InvalidArgument naming the variable.
absl::StatusOr<int> LocalWorldSizeFromEnv(const std::function<const char*(const char*)>& env);
absl::StatusOr<int> LocalWorldSizeFromEnv();

// Makes `device` this thread's current CUDA device (c10::cuda::set_device), so that what binds to
// the current device binds to it: NCCL's communicator in ProcessGroup::Create, the default
// stream, the caching allocator's first pool. Call it before creating the group. Nothing to do
// for the CPU.
absl::Status UseDevice(const c10::Device& device);

}  // namespace zerotrain::trainer
