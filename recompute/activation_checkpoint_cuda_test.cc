// CheckpointBlock on CUDA tensors: dropout inside a checkpointed block must give the gradients of
// the plain run bit for bit, which only holds if the recomputation restores the CUDA RNG state of
// every device the block's inputs live on; cpu_checkpointing must keep the saved inputs in pinned
// host memory. Every case skips, saying why, without --config=cuda or without a visible device
// (two devices for the multi-device case).
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "recompute/activation_checkpoint.h"
#include "recompute/checkpoint_testing.h"

namespace zerotrain::recompute {
namespace {

using testing::CompareOptions;
using testing::CompareRuns;
using testing::Mlp;
using testing::Weights;

// Why CUDA cases cannot run here, or "" when `devices` CUDA devices are visible.
std::string NoCuda(int devices = 1) {
#ifndef ZT_WITH_CUDA
  return "built without --config=cuda: LibTorch's CUDA libraries are not linked";
#else
  if (!torch::cuda::is_available()) return "no CUDA device visible";
  const int count = static_cast<int>(torch::cuda::device_count());
  if (count < devices) {
    return std::to_string(devices) + " CUDA devices needed, " + std::to_string(count) + " visible";
  }
  return "";
#endif
}

#define SKIP_WITHOUT_CUDA(devices)           \
  do {                                       \
    const std::string why = NoCuda(devices); \
    if (!why.empty()) GTEST_SKIP() << why;   \
  } while (0)

const torch::Device kCuda0(torch::kCUDA, 0);

TEST(CheckpointBlockCudaTest, DropoutMatchesBitwise) {
  SKIP_WITHOUT_CUDA(1);
  for (bool input_grad : {true, false}) {
    for (bool on_host : {false, true}) {
      SCOPED_TRACE(std::string("input_grad=") + (input_grad ? "1" : "0") +
                   " cpu_checkpointing=" + (on_host ? "1" : "0"));
      torch::manual_seed(1);
      Mlp mlp(16, 64, 0.3);
      mlp.to(kCuda0);
      torch::Tensor x = torch::randn({8, 16}, kCuda0).requires_grad_(input_grad);
      ActivationCheckpointOptions opts;
      opts.cpu_checkpointing = on_host;
      auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
      auto plain = [&] { return (mlp.forward(x) * Weights(x)).sum(); };
      testing::ExpectSeedMatters(mlp, {x}, plain);
      CompareOptions compare;
      compare.rng_devices = {torch::kCPU, kCuda0};
      // Draws on the device between forward and backward: the rerun must use forward's state.
      compare.between = [] { torch::rand({1000}, kCuda0); };
      CompareRuns(
          mlp, {x}, plain, [&] { return (CheckpointBlock(fn, x, opts) * Weights(x)).sum(); },
          compare);
    }
  }
}

// One block whose inputs live on two devices, an MLP on each: both devices' states are restored
// (restoring only the first input's device would change cuda:1's masks).
TEST(CheckpointBlockCudaTest, EveryInputDeviceIsRestored) {
  SKIP_WITHOUT_CUDA(2);
  const torch::Device cuda1(torch::kCUDA, 1);
  torch::manual_seed(2);
  torch::nn::Module both;
  auto m0 = both.register_module("m0", std::make_shared<Mlp>(16, 64, 0.3));
  auto m1 = both.register_module("m1", std::make_shared<Mlp>(16, 64, 0.3));
  m0->to(kCuda0);
  m1->to(cuda1);
  torch::Tensor a = torch::randn({8, 16}, kCuda0).requires_grad_(true);
  torch::Tensor b = torch::randn({8, 16}, cuda1).requires_grad_(true);
  Block fn = [&](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{m0->forward(in[0]) + m1->forward(in[1]).to(kCuda0)};
  };
  auto loss = [&](const torch::Tensor& y) { return (y * Weights(y)).sum(); };
  auto plain = [&] { return loss(fn({a, b})[0]); };
  testing::ExpectSeedMatters(both, {a, b}, plain);
  CompareOptions compare;
  compare.rng_devices = {torch::kCPU, kCuda0, cuda1};
  compare.between = [&] {
    torch::rand({1000}, kCuda0);
    torch::rand({1000}, cuda1);
  };
  CompareRuns(
      both, {a, b}, plain,
      [&] {
        return loss(CheckpointBlock(fn, {a, b})[0]);
      },
      compare);
}

// Pinned blocks in use. A block freed while a copy may still read it counts until the allocator
// next looks at its events, so those are settled (and the cache emptied) first.
int64_t PinnedActiveBytes() {
  torch::cuda::synchronize();
  at::HostAllocator* pinned = at::getHostAllocator(at::kCUDA);
  pinned->empty_cache();
  return pinned->get_stats().active_bytes.current;
}

int64_t DeviceAllocatedBytes() {
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(0).allocated_bytes[kAll].current;
}

// With cpu_checkpointing the block's (non-leaf) input is held in pinned host memory between
// forward and backward, so once the caller drops it the device holds none of it; without, the
// device keeps it and no pinned memory is used.
TEST(CheckpointBlockCudaTest, CpuCheckpointingKeepsInputsInPinnedHostMemory) {
  SKIP_WITHOUT_CUDA(1);
  torch::manual_seed(3);
  Mlp mlp(256, 256, 0.1);
  mlp.to(kCuda0);
  torch::Tensor x = torch::randn({1024, 256}, kCuda0).requires_grad_(true);
  auto fn = [&](const torch::Tensor& t) { return mlp.forward(t); };
  for (bool on_host : {false, true}) {
    SCOPED_TRACE(on_host ? "cpu_checkpointing" : "on the device");
    ActivationCheckpointOptions opts;
    opts.cpu_checkpointing = on_host;
    const int64_t pinned_before = PinnedActiveBytes();
    const int64_t device_before = DeviceAllocatedBytes();
    torch::Tensor loss;
    int64_t input_bytes = 0;
    {
      torch::Tensor h = x * 2;  // the block's input; its only other reference is dropped here
      input_bytes = h.nbytes();
      loss = CheckpointBlock(fn, h, opts).sum();
    }
    const int64_t pinned = PinnedActiveBytes() - pinned_before;
    const int64_t device = DeviceAllocatedBytes() - device_before;
    if (on_host) {
      EXPECT_GE(pinned, input_bytes) << "the saved input is not in pinned host memory";
      EXPECT_LT(device, input_bytes) << "the device still holds the saved input";
    } else {
      EXPECT_LT(pinned, input_bytes);
      EXPECT_GE(device, input_bytes) << "the saved input should stay on the device";
    }
    loss.backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().device(), kCuda0);
    x.mutable_grad() = torch::Tensor();
    for (auto p : mlp.parameters()) p.mutable_grad() = torch::Tensor();
  }
}

}  // namespace
}  // namespace zerotrain::recompute
