// CUDA allocator statistics: without CUDA, a clear Unavailable; with a device, allocated bytes
// rise by at least a tensor's nbytes while it lives and the peak keeps it after it is freed.
#include "monitor/device_memory_stats.h"

#include <torch/cuda.h>

#include "gtest/gtest.h"

namespace zerotrain::monitor {
namespace {

TEST(DeviceMemoryStatsTest, UnavailableWithoutCuda) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  auto stats = ReadCudaMemoryStats(0);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(stats.status().message().find("CUDA"), std::string::npos) << stats.status();
}

TEST(DeviceMemoryStatsTest, TracksATensorOnTheDevice) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA: built without --config=cuda or no device visible";
  }
  ASSERT_TRUE(ResetCudaPeak(0).ok());
  auto before = ReadCudaMemoryStats(0);
  ASSERT_TRUE(before.ok()) << before.status();
  int64_t nbytes = 0;
  {
    torch::Tensor t = torch::ones({16 << 20}, torch::TensorOptions().device(torch::kCUDA, 0));
    nbytes = t.nbytes();
    auto during = ReadCudaMemoryStats(0);
    ASSERT_TRUE(during.ok()) << during.status();
    EXPECT_GE(during->allocated_bytes - before->allocated_bytes, nbytes);
    EXPECT_GE(during->reserved_bytes, during->allocated_bytes);
  }
  auto after = ReadCudaMemoryStats(0);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->allocated_bytes, before->allocated_bytes);
  EXPECT_GE(after->peak_allocated_bytes, before->allocated_bytes + nbytes);
  EXPECT_NE(DeviceMemoryLine(*after).find("cuda:0 allocated"), std::string::npos);
  EXPECT_FALSE(ReadCudaMemoryStats(torch::cuda::device_count()).ok());
}

}  // namespace
}  // namespace zerotrain::monitor
