// The GPU tests' shared helpers (cuda_testing.h).
#include "engine/cuda_testing.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "tools/status_macros.h"

namespace zerotrain::engine::testing {

int CudaDevices() { return torch::cuda::is_available() ? torch::cuda::device_count() : 0; }

Wire WireFor(int world) { return CudaDevices() >= world ? Wire::kNccl : Wire::kGlooOneGpu; }

c10::Device RankDevice(Wire wire, int rank) {
  const c10::Device d(c10::kCUDA, static_cast<c10::DeviceIndex>(wire == Wire::kNccl ? rank : 0));
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(d);
  return d;
}

absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> Join(Wire wire) {
  comm::GroupOptions g;
  g.backend = wire == Wire::kNccl ? comm::BackendKind::kNccl : comm::BackendKind::kGloo;
  g.timeout = std::chrono::seconds(60);
  return JoinGroupFromEnv(g);
}

void ResetPeak(c10::Device device) {
  // The caching allocator learns the devices only at CUDA's lazy initialisation; before it, its
  // statistics calls throw "Invalid device argument".
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::DeviceAllocator* allocator = c10::getDeviceAllocator(c10::DeviceType::CUDA);
  allocator->emptyCache();
  allocator->resetPeakStats(device.index());
}

int64_t PeakAllocated(c10::Device device) {
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return c10::getDeviceAllocator(c10::DeviceType::CUDA)
      ->getDeviceStats(device.index())
      .allocated_bytes[kAll]
      .peak;
}

absl::StatusOr<int64_t> WideMlpPeak(EngineOptions options, comm::ProcessGroup* group) {
  const c10::Device device = options.device;
  ResetPeak(device);
  {
    auto net = std::make_shared<WideMlp>();
    options.train_batch_size = 8;
    options.reduce_bucket_size = WideMlp::kBucketNumel;
    options.allgather_bucket_size = WideMlp::kBucketNumel;
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, options, group));
    for (int step = 0; step < 2; ++step) {
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = net->forward(torch::randn({4, 1024}, torch::TensorOptions().device(device)))
                   .pow(2)
                   .mean();
      }
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      ZT_RETURN_IF_ERROR(engine->Step());
    }
  }
  return PeakAllocated(device);
}

}  // namespace zerotrain::engine::testing
