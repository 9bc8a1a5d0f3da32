// The NCCL backend, one rank per visible GPU: every collective checked exactly on CUDA tensors.
// Skips, saying why, when built without --config=cuda or when no GPU is present.
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>

#include "absl/strings/str_cat.h"
#include "comm/collective_checks.h"
#include "comm/process_group.h"
#include "comm/testing.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

#ifdef ZT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime.h>
#endif

namespace zerotrain::comm {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

int VisibleGpus() {
#ifdef ZT_WITH_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return -1;
#endif
}

TEST(NcclBackend, EveryCollectiveIsExactOnCudaTensors) {
  const int gpus = VisibleGpus();
  if (gpus < 0) GTEST_SKIP() << "built without --config=cuda: NCCL tests are not compiled in";
  if (gpus == 0) GTEST_SKIP() << "no CUDA device visible: NCCL tests need a GPU";
  // NCCL allows one rank per GPU in a communicator.
  const int world = std::min(gpus, 4);
  auto outcomes = SpawnRanks(world, [](int rank) -> absl::StatusOr<std::string> {
#ifdef ZT_WITH_CUDA
    c10::cuda::set_device(rank);
#endif
    GroupOptions options;
    options.backend = BackendKind::kNccl;
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(options));
    ZT_RETURN_IF_ERROR(CheckEveryCollective(*group, at::Device(at::kCUDA, rank)));
    ZT_RETURN_IF_ERROR(group->Barrier());
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// A host tensor goes through the device and back (the engine's small control values do), and
// the group counts both copies.
TEST(NcclBackend, HostTensorIsStagedThroughTheDeviceAndCounted) {
  const int gpus = VisibleGpus();
  if (gpus < 0) GTEST_SKIP() << "built without --config=cuda: NCCL tests are not compiled in";
  if (gpus == 0) GTEST_SKIP() << "no CUDA device visible: NCCL tests need a GPU";
  auto outcomes = SpawnRanks(1, [](int rank) -> absl::StatusOr<std::string> {
    GroupOptions options;
    options.backend = BackendKind::kNccl;
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(options));
    at::Tensor host = at::arange(4, at::kFloat);
    ZT_RETURN_IF_ERROR(group->AllReduce(host, ReduceOp::kSum));
    if (!host.is_cpu() || !host.equal(at::arange(4, at::kFloat))) {
      return absl::InternalError("the staged all-reduce did not come back into the host tensor");
    }
    HostDeviceBytes t = group->staging_traffic();
    if (t.host_to_device != 16 || t.device_to_host != 16) {
      return absl::InternalError(absl::StrCat("staging counted ", t.host_to_device,
                                              " bytes to the device and ", t.device_to_host,
                                              " back; want 16 each"));
    }
    // An all-gather into a host tensor: the shard goes over and the gathered result comes back.
    at::Tensor gathered = at::zeros({4}, at::kFloat);
    ZT_RETURN_IF_ERROR(group->AllGather(at::arange(4, at::kFloat), gathered));
    if (!gathered.equal(at::arange(4, at::kFloat))) {
      return absl::InternalError("the staged all-gather did not come back into the host tensor");
    }
    t = group->staging_traffic();
    if (t.host_to_device != 32 || t.device_to_host != 32) {
      return absl::InternalError(absl::StrCat("after the all-gather staging counted ",
                                              t.host_to_device, " bytes to the device and ",
                                              t.device_to_host, " back; want 32 each"));
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(NcclBackend, WithoutCudaTheGroupSaysHowToGetIt) {
  if (VisibleGpus() >= 0) GTEST_SKIP() << "built with --config=cuda";
  auto outcomes = SpawnRanks(1, [](int rank) -> absl::StatusOr<std::string> {
    GroupOptions options;
    options.backend = BackendKind::kNccl;
    return JoinGroupFromEnv(options).status().ToString();
  });
  ASSERT_TRUE(outcomes[0].status.ok()) << outcomes[0].status;
  EXPECT_NE(outcomes[0].payload.find("--config=cuda"), std::string::npos) << outcomes[0].payload;
}

}  // namespace
}  // namespace zerotrain::comm
