// The CPU tensor counter: live bytes follow allocations and frees (views and in-place ops add
// nothing), the peak is the high-water mark and resets to the live bytes, and tensors from before
// the install are never counted; each tensor counts under the role it was made in.
// Large blocks (mapped by the counter) are counted and served the same way; ReturnFreedHostMemory
// gives back a freed buffer the counter's cache kept.
#include "engine/tensor_memory.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "gtest/gtest.h"
#include "offload/memory_roles.h"

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

TEST(CpuTensorCounter, CountsEachTensorUnderItsAllocatingRole) {
  InstallCpuTensorCounter();
  const auto role_bytes = [](offload::MemoryRole r) {
    return offload::LiveHostBytes().bytes[static_cast<int>(r)];
  };
  const int64_t base = role_bytes(offload::MemoryRole::kGradientBuckets);
  at::Tensor bucket;
  {
    offload::MemoryRoleScope scope(offload::MemoryRole::kGradientBuckets);
    bucket = at::empty({1000}, at::kFloat);
  }
  at::Tensor other = at::empty({1000}, at::kFloat);  // outside the scope: not a bucket
  EXPECT_EQ(role_bytes(offload::MemoryRole::kGradientBuckets) - base, 4000);
  bucket = at::Tensor();  // freed outside the scope, still taken off the bucket role
  EXPECT_EQ(role_bytes(offload::MemoryRole::kGradientBuckets), base);
}

TEST(CpuTensorCounter, ServesRawAllocationsAsLibTorchKernelsMakeThem) {
  InstallCpuTensorCounter();
  const int64_t base = CpuTensorBytes();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* p = allocator->raw_allocate(1000);  // asserts that the context is the data pointer
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(CpuTensorBytes() - base, 1000);
  allocator->raw_deallocate(p);
  EXPECT_EQ(CpuTensorBytes(), base);
  void* large = allocator->raw_allocate(3 << 20);  // a block the counter maps itself
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large) % 64, 0u);  // LibTorch's alignment, at least
  EXPECT_EQ(CpuTensorBytes() - base, 3 << 20);
  allocator->raw_deallocate(large);
  EXPECT_EQ(CpuTensorBytes(), base);
}

TEST(ReturnFreedHostMemory, GivesBackABufferTheCounterKept) {
  InstallCpuTensorCounter();
  constexpr int64_t kBytes = 24 << 20;
  // The first 24 MiB block is freed into the counter's cache, and the second is served from it;
  // freed in turn, it stays there, as a later small block stays in glibc's heap.
  at::empty({kBytes}, at::kByte).fill_(1);
  at::Tensor big = at::empty({kBytes}, at::kByte).fill_(1);
  at::Tensor pin = at::ones({1000}, at::kByte);
  const int64_t with = ResidentHostBytes();
  big = at::Tensor();
  const int64_t kept = ResidentHostBytes();
  ReturnFreedHostMemory();
  const int64_t after = ResidentHostBytes();
  ASSERT_GT(with, 0);
  EXPECT_GT(kept, with - kBytes / 2) << "the buffer went back by itself: nothing to test";
  EXPECT_LT(after, kept - kBytes / 2) << "RSS " << with << " -> " << kept << " -> " << after;
}

}  // namespace
}  // namespace zerotrain::engine
