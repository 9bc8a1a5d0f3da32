// StepStaging's bookkeeping on the CPU, with a recording TransferStream and the meta device
// standing in for "another device than the state's": nothing is staged where a tensor shares the
// state's device; a gradient started early (StartIn) is copied once; WaitInputs waits for every
// input's fence; Publish copies each output back and orders the stream (or, into host memory,
// waits); a pool block is not reused while a copy's fence is pending; a copy that outlives the
// timeout is an error naming the direction.
#include "engine/step_staging.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include "gtest/gtest.h"

namespace zerotrain::engine {
namespace {

struct FakeFence : offload::Fence::Impl {
  bool signalled = false;
  absl::Status result;  // what the finished copy reports
  int orders = 0;
  bool done() override { return signalled; }
  absl::Status Wait(absl::Duration) override {
    return signalled ? result : absl::DeadlineExceededError("copy still running");
  }
  absl::Status OrderCurrentStream() override {
    ++orders;
    return absl::OkStatus();
  }
};

// Records each copy (destination device, source device) and hands out fences the test signals.
class RecordingStream : public offload::TransferStream {
 public:
  absl::StatusOr<offload::Fence> Copy(const at::Tensor& dst, const at::Tensor& src) override {
    copies.emplace_back(dst.device(), src.device());
    fences.push_back(std::make_shared<FakeFence>());
    fences.back()->signalled = signal_at_once;
    fences.back()->result = copy_result;
    return offload::Fence(fences.back());
  }
  c10::Device device() const override { return c10::Device(c10::kMeta); }

  bool signal_at_once = true;
  absl::Status copy_result;
  std::vector<std::pair<c10::Device, c10::Device>> copies;
  std::vector<std::shared_ptr<FakeFence>> fences;
};

offload::PinnedHostPool Pool() {
  absl::StatusOr<offload::PinnedHostPool> pool = offload::PinnedHostPool::Create({});
  EXPECT_TRUE(pool.ok()) << pool.status();
  return *std::move(pool);
}

// The meta device as a device runtime: buffers there, and nothing else a staging asks of it.
class MetaRuntime : public DeviceRuntime {
 public:
  MetaRuntime() : DeviceRuntime(c10::Device(c10::kMeta)) {}
  bool CopiesFromPinnedHost() const override { return true; }
  std::unique_ptr<StepClock> MakeClock() const override { return nullptr; }
  absl::StatusOr<at::Tensor> GradStats(const std::vector<at::Tensor>&,
                                       const GradStatsRequest&) const override {
    return absl::UnimplementedError("meta");
  }
  absl::StatusOr<at::Tensor> Buffer(const at::Tensor& like,
                                    offload::PinnedHostPool*) const override {
    return at::empty({like.numel()}, like.options().device(device()));
  }
  absl::Status AdamStep(const optim::AdamOptions&, int64_t,
                        absl::Span<const optim::AdamShard>) const override {
    return absl::UnimplementedError("meta");
  }
  bool RunsHostKernels() const override { return false; }
  absl::StatusOr<std::vector<c10::Device>> RngDevices() const override {
    return std::vector<c10::Device>{};
  }
};

const DeviceRuntime* RuntimeOf(c10::Device device) {
  static const MetaRuntime* const meta = new MetaRuntime();
  return device.is_meta() ? static_cast<const DeviceRuntime*>(meta) : &DeviceRuntime::Host();
}

// A StepStaging whose optimizer state lives on `state`, over a recording stream and its own pool.
struct Rig {
  explicit Rig(c10::Device state)
      : pool(Pool()), staging(RuntimeOf(state), &stream, &pool, absl::Seconds(1), &counted) {}
  offload::PinnedHostPool pool;
  RecordingStream stream;
  comm::HostDeviceCopies counted;
  StepStaging staging;
};

TEST(StepStagingTest, TensorsOnTheStatesDeviceAreUsedInPlace) {
  Rig rig{c10::Device(c10::kCPU)};
  auto& [pool, stream, counted, staging] = rig;
  const at::Tensor grads = at::ones({8});
  at::Tensor params = at::zeros({8});
  EXPECT_TRUE(staging.In(grads)->is_same(grads));
  EXPECT_TRUE(staging.Out(params)->is_same(params));
  EXPECT_TRUE(staging.WaitInputs().ok());
  EXPECT_TRUE(staging.Publish().ok());
  EXPECT_TRUE(stream.copies.empty());
}

TEST(StepStagingTest, DeviceGradientsAreCopiedOnceAndWaitedFor) {
  Rig rig{c10::Device(c10::kCPU)};
  auto& [pool, stream, counted, staging] = rig;
  stream.signal_at_once = false;
  const at::Tensor grads = at::empty({64}, at::TensorOptions().device(c10::kMeta));
  staging.StartIn(grads);  // from the reducer, while backward runs
  absl::StatusOr<at::Tensor> in = staging.In(grads);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(in->is_cpu());
  EXPECT_EQ(in->numel(), 64);
  ASSERT_EQ(stream.copies.size(), 1u) << "the early copy was not reused";
  EXPECT_TRUE(stream.copies[0].first.is_cpu() && stream.copies[0].second.is_meta());
  // Still running: WaitInputs says so, naming what it waited for.
  const absl::Status waited = staging.WaitInputs();
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(waited.message().find("copying gradients to cpu"), std::string::npos) << waited;
}

TEST(StepStagingTest, OutputsGoBackAndTheirBlocksWaitForTheCopies) {
  Rig rig{c10::Device(c10::kCPU)};
  auto& [pool, stream, counted, staging] = rig;
  const at::Tensor params = at::empty({32}, at::TensorOptions().device(c10::kMeta));
  absl::StatusOr<at::Tensor> out = staging.Out(params);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->is_cpu());
  stream.signal_at_once = false;
  ASSERT_TRUE(staging.Publish().ok());
  ASSERT_EQ(stream.copies.size(), 1u);
  EXPECT_TRUE(stream.copies[0].first.is_meta() && stream.copies[0].second.is_cpu());
  EXPECT_EQ(stream.fences[0]->orders, 1) << "the device copy did not order the stream";
  // The next step's first copy waits for that block's fence: still running, so it fails, and the
  // block, which the copy may still read, is never handed out again: the next buffer is another.
  const at::Tensor grads = at::empty({32}, at::TensorOptions().device(c10::kMeta));
  EXPECT_EQ(staging.In(grads).status().code(), absl::StatusCode::kDeadlineExceeded);
  const int64_t leaked = pool.bytes_in_use();
  EXPECT_GT(leaked, 0);
  stream.signal_at_once = true;
  EXPECT_TRUE(staging.In(grads).ok());
  EXPECT_GT(pool.bytes_in_use(), leaked) << "the pending block was reused";
  EXPECT_TRUE(staging.Reset().ok());
}

// A copy to the device that has already finished frees its block at once, and if it failed,
// Publish says so rather than dropping the error with the block.
TEST(StepStagingTest, AFinishedCopyFreesItsBlockAndReportsItsError) {
  Rig rig{c10::Device(c10::kCPU)};
  auto& [pool, stream, counted, staging] = rig;
  const at::Tensor params = at::empty({256}, at::TensorOptions().device(c10::kMeta));
  ASSERT_TRUE(staging.Out(params).ok());
  ASSERT_TRUE(staging.Publish().ok());
  EXPECT_EQ(pool.bytes_in_use(), 0) << "a finished copy's block was kept";
  ASSERT_TRUE(staging.Out(params).ok());
  stream.copy_result = absl::InternalError("the copy failed");
  const absl::Status failed = staging.Publish();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  EXPECT_NE(failed.message().find("the copy failed"), std::string::npos) << failed;
  EXPECT_EQ(pool.bytes_in_use(), 0);
}

// Zeros where the optimizer writes nothing (padding), not what the pool block held.
TEST(StepStagingTest, OutputBuffersStartAtZero) {
  Rig rig{c10::Device(c10::kCPU)};
  auto& [pool, stream, counted, staging] = rig;
  const at::Tensor params = at::empty({1024}, at::TensorOptions().device(c10::kMeta));
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<at::Tensor> out = staging.Out(params);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->abs().sum().item<float>(), 0.0f) << "step " << step;
    out->fill_(7.0f);  // what the optimizer wrote, left in the block for the next step
    ASSERT_TRUE(staging.Publish().ok());
    ASSERT_TRUE(staging.Reset().ok());
  }
}

TEST(StepStagingTest, AStateOnAnotherDeviceStagesHostTensorsThere) {
  Rig rig{c10::Device(c10::kMeta)};
  auto& [pool, stream, counted, staging] = rig;
  at::Tensor host = at::zeros({16}, at::kBFloat16);
  absl::StatusOr<at::Tensor> out = staging.Out(host);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->is_meta());
  EXPECT_EQ(out->scalar_type(), at::kBFloat16);
  stream.signal_at_once = false;
  // Into host memory Publish waits for the copy, so the values are there when it returns.
  EXPECT_EQ(staging.Publish().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(stream.fences[0]->orders, 0);
}

}  // namespace
}  // namespace zerotrain::engine
