// TransferStream on the CPU (the implementation the CPU suite runs in the engine): copies land
// before Copy returns, their fences are signalled, mismatches are errors, and devices this build
// cannot copy to are refused by name.
#include "offload/transfer_stream.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>

#include "gtest/gtest.h"

namespace zerotrain::offload {
namespace {

TEST(TransferStreamTest, CpuCopiesBeforeReturningWithASignalledFence) {
  auto stream = MakeTransferStream(c10::Device(c10::kCPU));
  ASSERT_TRUE(stream.ok()) << stream.status();
  const at::Tensor src = at::arange(12, at::kFloat).to(at::kBFloat16);
  at::Tensor dst = at::zeros({12}, at::kBFloat16);
  absl::StatusOr<Fence> fence = (*stream)->Copy(dst, src);
  ASSERT_TRUE(fence.ok()) << fence.status();
  EXPECT_TRUE(fence->done());
  EXPECT_TRUE(fence->Wait(absl::Milliseconds(1)).ok());
  EXPECT_TRUE(fence->OrderCurrentStream().ok());
  EXPECT_TRUE(at::equal(dst, src));
  // A 2-D source into a 1-D destination of the same size: the elements in order.
  at::Tensor flat = at::zeros({6}, at::kFloat);
  ASSERT_TRUE((*stream)->Copy(flat, at::arange(6, at::kFloat).view({2, 3})).ok());
  EXPECT_TRUE(at::equal(flat, at::arange(6, at::kFloat)));
}

TEST(TransferStreamTest, MismatchedTensorsAreRefused) {
  auto stream = MakeTransferStream(c10::Device(c10::kCPU));
  ASSERT_TRUE(stream.ok());
  at::Tensor dst = at::zeros({4}, at::kFloat);
  EXPECT_EQ((*stream)->Copy(dst, at::zeros({5}, at::kFloat)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->Copy(dst, at::zeros({4}, at::kHalf)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->Copy(at::Tensor(), dst).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TransferStreamTest, ADefaultFenceIsSignalled) {
  const Fence f;
  EXPECT_TRUE(f.done());
  EXPECT_TRUE(f.Wait(absl::ZeroDuration()).ok());
}

#ifndef ZT_WITH_CUDA
TEST(TransferStreamTest, WithoutCudaACudaDeviceIsRefusedByName) {
  auto stream = MakeTransferStream(c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stream.status().message().find("cuda:0"), std::string::npos) << stream.status();
}
#endif

}  // namespace
}  // namespace zerotrain::offload
