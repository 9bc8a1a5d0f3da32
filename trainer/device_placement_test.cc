// ResolvePlacement on this machine (no GPU, or a CPU-only build: "auto" is the CPU, "cuda" an error
// naming run.device; under --config=cuda the test links LibTorch's CUDA libraries, so that build's
// answer is checked too) and on described machines (2 GPUs, CUDA not built in), each against the
// device and backend the rules in device_placement.h give, worked out by hand;
// LocalWorldSizeFromEnv on fake environments.
#include "trainer/device_placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace zerotrain::trainer {
namespace {

using ::testing::HasSubstr;

RunOptions Options(DeviceRequest device, DistBackend backend = std::nullopt) {
  RunOptions r;
  r.device = device;
  r.dist_backend = backend;
  return r;
}

constexpr CudaDevices kTwoGpus{/*built=*/true, /*visible=*/2};
constexpr CudaDevices kNoGpu{/*built=*/true, /*visible=*/0};
constexpr CudaDevices kCpuBuild{/*built=*/false, /*visible=*/0};

std::string Error(const RunOptions& run, int local_rank, int local_world_size,
                  const CudaDevices& cuda) {
  auto p = ResolvePlacement(run, local_rank, local_world_size, cuda);
  EXPECT_FALSE(p.ok()) << p->device.str();
  if (p.ok()) return "";
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  return std::string(p.status().message());
}

TEST(DevicePlacementTest, ThisMachinePlacesRanksOnTheCpu) {
  const CudaDevices here = VisibleCudaDevices();
  if (here.visible > 0) GTEST_SKIP() << "a GPU is visible; the described machines below still run";
  auto p = ResolvePlacement(Options(DeviceRequest::kAuto), 1, 2, here);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->device, c10::Device(c10::kCPU));
  EXPECT_EQ(p->backend, comm::BackendKind::kGloo);
  EXPECT_THAT(Error(Options(DeviceRequest::kCuda), 0, 2, here),
              HasSubstr("run.device = \"cuda\": "));
  EXPECT_TRUE(UseDevice(c10::Device(c10::kCPU)).ok());
}

TEST(DevicePlacementTest, CudaRanksUseTheirLocalRanksDevice) {
  for (DeviceRequest d : {DeviceRequest::kAuto, DeviceRequest::kCuda}) {
    for (int local_rank : {0, 1}) {
      auto p = ResolvePlacement(Options(d), local_rank, 2, kTwoGpus);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->device, c10::Device(c10::kCUDA, local_rank));
      EXPECT_EQ(p->backend, comm::BackendKind::kNccl);  // the default on CUDA
    }
  }
  // The CPU when asked, even with GPUs; the backend then defaults to Gloo.
  auto cpu = ResolvePlacement(Options(DeviceRequest::kCpu), 1, 2, kTwoGpus);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->device, c10::Device(c10::kCPU));
  EXPECT_EQ(cpu->backend, comm::BackendKind::kGloo);
  // An explicit backend stays.
  auto shm =
      ResolvePlacement(Options(DeviceRequest::kAuto, comm::BackendKind::kShm), 1, 2, kTwoGpus);
  ASSERT_TRUE(shm.ok()) << shm.status();
  EXPECT_EQ(shm->device, c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(shm->backend, comm::BackendKind::kShm);
}

TEST(DevicePlacementTest, GlooAndShmShareGpusWhenRanksOutnumberThem) {
  for (DistBackend b : {comm::BackendKind::kGloo, comm::BackendKind::kShm}) {
    for (int local_rank : {0, 1, 2, 3, 4}) {
      auto p = ResolvePlacement(Options(DeviceRequest::kCuda, b), local_rank, 5, kTwoGpus);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->device, c10::Device(c10::kCUDA, local_rank % 2));
      EXPECT_EQ(p->backend, b);
    }
  }
}

TEST(DevicePlacementTest, NcclRefusesMoreLocalRanksThanGpus) {
  const std::string e =
      Error(Options(DeviceRequest::kCuda, comm::BackendKind::kNccl), 0, 3, kTwoGpus);
  EXPECT_THAT(e, HasSubstr("run.dist_backend = \"nccl\": 3 ranks on this node but 2 visible GPUs"));
  EXPECT_THAT(e, HasSubstr("NCCL refuses two ranks on one GPU"));
  EXPECT_THAT(e, HasSubstr("\"gloo\" or \"shm\""));
  // With the node's count unknown, "auto" means NCCL: the rank whose device does not exist fails.
  EXPECT_THAT(Error(Options(DeviceRequest::kAuto), 2, 0, kTwoGpus),
              HasSubstr("LOCAL_RANK 2 but 2 visible GPUs"));
  EXPECT_TRUE(ResolvePlacement(Options(DeviceRequest::kAuto), 1, 0, kTwoGpus).ok());
}

TEST(DevicePlacementTest, AutoSharesGpusOverGlooWhenTheNodeHasMoreRanksThanGpus) {
  for (int rank = 0; rank < 4; ++rank) {
    auto p = ResolvePlacement(Options(DeviceRequest::kAuto), rank, 4, kTwoGpus);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->backend, comm::BackendKind::kGloo);
    EXPECT_EQ(p->device, c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(rank % 2)));
  }
  auto two = ResolvePlacement(Options(DeviceRequest::kAuto), 1, 2, kTwoGpus);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->backend, comm::BackendKind::kNccl);
}

TEST(DevicePlacementTest, CudaWithoutAGpuAndNcclOnTheCpuAreErrors) {
  EXPECT_THAT(Error(Options(DeviceRequest::kCuda), 0, 1, kCpuBuild),
              HasSubstr("run.device = \"cuda\": this binary was built without CUDA: build it with "
                        "--config=cuda; or set run.device \"cpu\""));
  EXPECT_THAT(Error(Options(DeviceRequest::kCuda), 0, 1, kNoGpu),
              HasSubstr("run.device = \"cuda\": no CUDA device is visible"));
  // "auto" on a machine without a GPU is the CPU, where NCCL cannot run.
  EXPECT_THAT(Error(Options(DeviceRequest::kAuto, comm::BackendKind::kNccl), 0, 1, kNoGpu),
              HasSubstr("run.dist_backend = \"nccl\": NCCL needs a GPU, and run.device = "
                        "\"auto\" found none"));
  auto p = ResolvePlacement(Options(DeviceRequest::kAuto), 0, 1, kNoGpu);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->device, c10::Device(c10::kCPU));
  EXPECT_EQ(p->backend, comm::BackendKind::kGloo);
}

TEST(DevicePlacementTest, LocalWorldSizeFromTheLaunchersVariables) {
  auto from = [](std::map<std::string, std::string> vars) {
    return LocalWorldSizeFromEnv([vars = std::move(vars)](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_EQ(*from({{"LOCAL_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}), 4);
  EXPECT_EQ(*from({{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}), 2);
  EXPECT_EQ(*from({{"SLURM_NTASKS_PER_NODE", "8"}}), 8);
  EXPECT_EQ(*from({{"SLURM_NTASKS_PER_NODE", "2(x3)"}}), 0);  // not one number: unknown
  // srun's own count for its step wins over the job's --ntasks-per-node.
  EXPECT_EQ(*from({{"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_NTASKS_PER_NODE", "8"}}), 2);
  EXPECT_EQ(*from({{"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_NTASKS_PER_NODE", "8"}}), 8);
  EXPECT_EQ(*from({}), 0);
  auto bad = from({{"LOCAL_WORLD_SIZE", "two"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("LOCAL_WORLD_SIZE = \"two\""));
}

}  // namespace
}  // namespace zerotrain::trainer
