// What the engine's GPU tests share (engine_cuda_test, engine_cuda_offload_test): how many CUDA
// devices are visible, the skip that says why a test did not run, how ranks reach each other on
// one or several GPUs, a net whose model states dominate device memory, and the caching
// allocator's peak.
#pragma once

#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/comm.h"
#include "engine/engine_options.h"
#include "engine/test_models.h"

namespace zerotrain::engine::testing {

int CudaDevices();

#define ZT_SKIP_WITHOUT_GPUS(n)                                                         \
  if (::zerotrain::engine::testing::CudaDevices() < (n))                                \
  GTEST_SKIP() << "needs " << (n) << " CUDA device(s), "                                \
               << ::zerotrain::engine::testing::CudaDevices()                           \
               << " visible (a CPU machine, or a binary built without --config=cuda); " \
                  "tools/gpu_check.sh runs it on a GPU machine"

// How the ranks of a case reach each other: one GPU each over NCCL, or all on cuda:0 over Gloo
// (NCCL refuses two ranks on one device; Gloo stages CUDA tensors through host memory).
enum class Wire { kNccl, kGlooOneGpu };
// NCCL when every rank of `world` has a GPU of its own, else Gloo on one.
Wire WireFor(int world);

// This rank's device, made current (the NCCL communicator binds to the current device).
c10::Device RankDevice(Wire wire, int rank);
absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> Join(Wire wire);

// The caching allocator's peak allocated bytes on `device` since ResetPeak (which also empties
// the cache).
void ResetPeak(c10::Device device);
int64_t PeakAllocated(c10::Device device);

// The allocator's peak over two steps of a fresh WideMlp under an engine with `options` on
// `group` (train batch 8 and WideMlp::kBucketNumel buckets set here; the net and engine freed
// after).
absl::StatusOr<int64_t> WideMlpPeak(EngineOptions options, comm::ProcessGroup* group);

}  // namespace zerotrain::engine::testing
