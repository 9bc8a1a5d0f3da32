// The host's DeviceRuntime as the CPU suite runs it: the choice by device type, gradient
// statistics against HostGradStats, staging buffers from the pool, the Adam kernel against
// optim's, and the generators a checkpoint keeps. The CUDA runtime's cases, against the host's
// results, skip without a GPU; tools/gpu_check.sh runs them on one.
#include "engine/device_runtime.h"

#include <ATen/Context.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include "engine/cuda_testing.h"

#include <string>
#include <vector>

namespace zerotrain::engine {
namespace {

TEST(DeviceRuntime, ForChoosesByDeviceTypeAndRefusesOthers) {
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> host = DeviceRuntime::For(c10::Device(c10::kCPU));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE((*host)->device().is_cpu());
  EXPECT_TRUE((*host)->RunsHostKernels());
  EXPECT_FALSE((*host)->CopiesFromPinnedHost());
  EXPECT_TRUE(DeviceRuntime::Host().device().is_cpu());
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> meta = DeviceRuntime::For(c10::Device(c10::kMeta));
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(meta.status().message()).find("device meta"), std::string::npos)
      << meta.status();
}

TEST(DeviceRuntime, HostGradStatsAreHostGradStatsAndShardsMustBeOnTheHost) {
  at::manual_seed(5);
  std::vector<at::Tensor> grads = {at::randn({100}), at::randn({7}).to(at::kHalf)};
  const GradStatsRequest both{true, true};
  absl::StatusOr<at::Tensor> got = DeviceRuntime::Host().GradStats(grads, both);
  ASSERT_TRUE(got.ok()) << got.status();
  const at::Tensor want = *HostGradStats(grads, both);
  EXPECT_EQ((*got)[0].item<double>(), want[0].item<double>());
  EXPECT_EQ((*got)[1].item<double>(), want[1].item<double>());
  grads.push_back(at::zeros({1}, at::TensorOptions().device(at::kMeta)));
  absl::StatusOr<at::Tensor> mixed = DeviceRuntime::Host().GradStats(grads, both);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(std::string(mixed.status().message()).find("meta"), std::string::npos)
      << mixed.status();
}

TEST(DeviceRuntime, HostBuffersComeFromThePoolAndGoBack) {
  absl::StatusOr<offload::PinnedHostPool> pool = offload::PinnedHostPool::Create({});
  ASSERT_TRUE(pool.ok()) << pool.status();
  const at::Tensor like = at::ones({1000}, at::kBFloat16);
  {
    absl::StatusOr<at::Tensor> buffer = DeviceRuntime::Host().Buffer(like, &*pool);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(buffer->numel(), 1000);
    EXPECT_EQ(buffer->scalar_type(), at::kBFloat16);
    EXPECT_TRUE(buffer->device().is_cpu());
    EXPECT_GE(pool->bytes_in_use(), like.nbytes());
  }
  EXPECT_EQ(pool->bytes_in_use(), 0) << "the buffer's block stayed out of the pool";
}

// An fp32 Adam shard over the tensors' memory (host or device).
optim::AdamShard ShardOver(at::Tensor& p, at::Tensor& g, at::Tensor& m, at::Tensor& v) {
  optim::AdamShard s;
  s.size = p.numel();
  s.params = p.data_ptr<float>();
  s.grads = g.data_ptr<float>();
  s.exp_avg = m.data_ptr<float>();
  s.exp_avg_sq = v.data_ptr<float>();
  return s;
}

TEST(DeviceRuntime, HostAdamStepIsOptimsKernel) {
  at::manual_seed(6);
  const int64_t n = 37;
  at::Tensor p1 = at::randn({n}), g = at::randn({n});
  at::Tensor p2 = p1.clone();
  const at::Tensor before = p1.clone();
  at::Tensor m1 = at::zeros({n}), v1 = at::zeros({n}), m2 = at::zeros({n}), v2 = at::zeros({n});
  optim::AdamOptions options;
  options.lr = 0.01;
  const optim::AdamShard a = ShardOver(p1, g, m1, v1), b = ShardOver(p2, g, m2, v2);
  ASSERT_TRUE(DeviceRuntime::Host().AdamStep(options, 1, absl::MakeConstSpan(&a, 1)).ok());
  ASSERT_TRUE(optim::FusedAdamStep(options, 1, b).ok());
  EXPECT_FALSE(p1.equal(before)) << "the step changed nothing";
  EXPECT_TRUE(p1.equal(p2));
  EXPECT_TRUE(m1.equal(m2) && v1.equal(v2));
}

TEST(DeviceRuntime, HostKeepsTheCurrentCudaGeneratorWhereThereIsOne) {
  absl::StatusOr<std::vector<c10::Device>> devices = DeviceRuntime::Host().RngDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (!at::globalContext().hasCUDA()) {
    EXPECT_TRUE(devices->empty());
  } else {
    ASSERT_EQ(devices->size(), 1u);
    EXPECT_TRUE(devices->front().is_cuda());
  }
}

std::unique_ptr<DeviceRuntime> Cuda() {
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> cuda = DeviceRuntime::For(c10::Device(c10::kCUDA));
  EXPECT_TRUE(cuda.ok()) << cuda.status();
  return cuda.ok() ? *std::move(cuda) : nullptr;
}

TEST(DeviceRuntimeCuda, ForNamesTheCurrentDeviceAndItsTraits) {
  ZT_SKIP_WITHOUT_GPUS(1);
  const std::unique_ptr<DeviceRuntime> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  EXPECT_TRUE(cuda->device().is_cuda());
  EXPECT_TRUE(cuda->device().has_index());
  EXPECT_TRUE(cuda->CopiesFromPinnedHost());
  EXPECT_FALSE(cuda->RunsHostKernels());
  absl::StatusOr<std::vector<c10::Device>> rng = cuda->RngDevices();
  ASSERT_TRUE(rng.ok()) << rng.status();
  ASSERT_FALSE(rng->empty());
  EXPECT_EQ(rng->front(), cuda->device());
}

TEST(DeviceRuntimeCuda, GradStatsAndAdamMatchTheHost) {
  ZT_SKIP_WITHOUT_GPUS(1);
  const std::unique_ptr<DeviceRuntime> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  at::manual_seed(7);
  const std::vector<at::Tensor> host = {at::randn({4096}), at::randn({33}).to(at::kBFloat16)};
  std::vector<at::Tensor> device;
  for (const at::Tensor& t : host) device.push_back(t.to(cuda->device()));
  absl::StatusOr<at::Tensor> got = cuda->GradStats(device, {true, true});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->device() == cuda->device());
  const at::Tensor want = *HostGradStats(host, {true, true});
  EXPECT_EQ((*got)[0].item<double>(), 0);
  EXPECT_NEAR((*got)[1].item<double>(), want[1].item<double>(), 1e-5 * want[1].item<double>());
  EXPECT_FALSE(cuda->GradStats({device[0], host[1]}, {true, true}).ok()) << "a host shard";

  const int64_t n = 1000;
  at::Tensor p = at::randn({n}), g = at::randn({n});
  at::Tensor m = at::zeros({n}), v = at::zeros({n});
  at::Tensor dp = p.to(cuda->device()), dg = g.to(cuda->device());
  at::Tensor dm = m.to(cuda->device()), dv = v.to(cuda->device());
  optim::AdamOptions options;
  options.lr = 0.01;
  options.adamw = true;
  options.weight_decay = 0.1;
  const optim::AdamShard on_host = ShardOver(p, g, m, v), on_device = ShardOver(dp, dg, dm, dv);
  ASSERT_TRUE(DeviceRuntime::Host().AdamStep(options, 1, absl::MakeConstSpan(&on_host, 1)).ok());
  ASSERT_TRUE(cuda->AdamStep(options, 1, absl::MakeConstSpan(&on_device, 1)).ok());
  EXPECT_TRUE(dp.cpu().allclose(p, 1e-6, 1e-6));
  EXPECT_TRUE(dv.cpu().allclose(v, 1e-6, 1e-9));

  absl::StatusOr<at::Tensor> buffer = cuda->Buffer(host[1], nullptr);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(buffer->device() == cuda->device());
  EXPECT_EQ(buffer->numel(), 33);
  EXPECT_EQ(buffer->scalar_type(), at::kBFloat16);
}

}  // namespace
}  // namespace zerotrain::engine
