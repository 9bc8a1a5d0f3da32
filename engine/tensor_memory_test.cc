// The CPU tensor counter: live bytes follow allocations and frees (views and in-place ops add
// nothing), the peak is the high-water mark and resets to the live bytes, and tensors from before
// the install are never counted.
#include "engine/tensor_memory.h"

#include <ATen/ATen.h>

#include "gtest/gtest.h"

namespace zerotrain::engine {
namespace {

TEST(CpuTensorCounter, CountsLiveBytesAndTheirPeak) {
  at::Tensor before = at::ones({1000}, at::kFloat);  // not counted, then or when freed
  EXPECT_EQ(CpuTensorBytes(), 0);
  InstallCpuTensorCounter();
  InstallCpuTensorCounter();  // a second install changes nothing
  ASSERT_TRUE(CpuTensorCounterInstalled());
  const int64_t base = CpuTensorBytes();
  {
    at::Tensor a = at::empty({1 << 20}, at::kFloat);
    EXPECT_EQ(CpuTensorBytes() - base, 4 << 20);
    at::Tensor view = a.narrow(0, 0, 100);
    a.mul_(2);
    EXPECT_EQ(CpuTensorBytes() - base, 4 << 20);
    {
      at::Tensor b = a + 1;  // a second buffer of the same size
      EXPECT_EQ(CpuTensorBytes() - base, 8 << 20);
    }
    EXPECT_EQ(CpuTensorBytes() - base, 4 << 20);
    EXPECT_GE(CpuTensorPeakBytes() - base, 8 << 20);
  }
  before = at::Tensor();  // its bytes were never added, so nothing is taken off
  EXPECT_EQ(CpuTensorBytes(), base);
  ResetCpuTensorPeak();
  EXPECT_EQ(CpuTensorPeakBytes(), base);
  { at::Tensor c = at::zeros({3, 1000}, at::kDouble); }
  EXPECT_EQ(CpuTensorPeakBytes() - base, 3 * 1000 * 8);
  EXPECT_EQ(CpuTensorBytes(), base);
}

}  // namespace
}  // namespace zerotrain::engine
