// OutOfMemoryLine on synthetic LibTorch messages (the text of c10::OutOfMemoryError as LibTorch
// 2.x words it, as it reaches the trainer wrapped by the engine), against lines written out by
// hand: the rank, device, phase and stage, the size parsed in every unit LibTorch prints, and the
// suggestions for each rung of the stage/offload ladder.
#include "trainer/out_of_memory.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace zerotrain::trainer {
namespace {

// What LibTorch's CUDA caching allocator throws, behind the engine's "Backward on rank" prefix.
constexpr char kBackwardOom[] =
    "Backward on rank 1 (micro step 3): CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has "
    "a total capacity of 79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this "
    "process has 77.91 GiB memory in use. Of the allocated memory 75.02 GiB is allocated by "
    "PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

TrainerConfig Config(int stage, engine::OffloadDevice opt = engine::OffloadDevice::kNone,
                     engine::OffloadDevice param = engine::OffloadDevice::kNone) {
  TrainerConfig c;
  c.engine.stage = stage;
  c.engine.device = c10::Device(c10::kCUDA, 1);
  c.engine.offload_optimizer.device = opt;
  c.engine.offload_param.device = param;
  c.batch.micro_batch_size = 8;
  c.batch.gradient_accumulation_steps = 1;
  c.batch.train_batch_size = 16;
  return c;
}

TEST(OutOfMemoryTest, RecognisesLibTorchsMessageOnly) {
  EXPECT_TRUE(IsCudaOutOfMemory(kBackwardOom));
  EXPECT_FALSE(IsCudaOutOfMemory(
      "DefaultCPUAllocator: not enough memory: you tried to allocate 8589934592 bytes."));
  EXPECT_FALSE(IsCudaOutOfMemory("Backward on rank 0 (micro step 0): shape mismatch"));
}

TEST(OutOfMemoryTest, ParsesTheRequestedSizeInEachUnit) {
  EXPECT_EQ(RequestedBytes(kBackwardOom), int64_t{2} << 30);
  EXPECT_EQ(RequestedBytes("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0"), 20 << 20);
  EXPECT_EQ(RequestedBytes("CUDA out of memory. Tried to allocate 1.50 KiB. GPU 0"), 1536);
  EXPECT_EQ(RequestedBytes("CUDA out of memory. Tried to allocate 512 bytes. GPU 0"), 512);
  EXPECT_EQ(RequestedBytes("CUDA out of memory. Tried to allocate 0.50 TiB."), int64_t{1} << 39);
  EXPECT_EQ(RequestedBytes("CUDA out of memory."), std::nullopt);
  EXPECT_EQ(RequestedBytes("CUDA out of memory. Tried to allocate lots"), std::nullopt);
  EXPECT_EQ(RequestedBytes("CUDA out of memory. Tried to allocate 3 parsecs"), std::nullopt);
}

TEST(OutOfMemoryTest, BackwardLineNamesEverythingAndAdvisesActivationsFirst) {
  const std::string line = OutOfMemoryLine(Config(2), 1, RunPhase::kBackward, kBackwardOom);
  EXPECT_EQ(line,
            "out of CUDA memory on rank 1 (cuda:1) in the backward pass at ZeRO stage 2: tried to "
            "allocate 2.00 GiB (2147483648 bytes) with 1.23 GiB free of 79.15 GiB. To fit, try: "
            "activation checkpointing (model.checkpoint_every: 1); a smaller micro batch "
            "(train_micro_batch_size_per_gpu: 4 with gradient_accumulation_steps: 2 keeps the "
            "batch of 16); ZeRO stage 2 + optimizer offload to CPU "
            "(zero_optimization.offload_optimizer.device: \"cpu\"); more GPUs (ZeRO divides the "
            "sharded states by the number of ranks). --estimate_memory compares the stages' "
            "model-state memory");
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 0);
}

TEST(OutOfMemoryTest, OptimizerStepAdvisesModelStatesFirst) {
  TrainerConfig c = Config(3, engine::OffloadDevice::kCpu);
  c.model.checkpoint_every = 1;
  c.batch.micro_batch_size = 3;  // the largest smaller divisor is 1
  c.batch.train_batch_size = 6;
  const std::string line =
      OutOfMemoryLine(c, 0, RunPhase::kStep, "CUDA out of memory. Tried to allocate 20.00 MiB.");
  EXPECT_EQ(line,
            "out of CUDA memory on rank 0 (cuda:1) in the optimizer step at ZeRO stage 3: tried "
            "to allocate 20.00 MiB (20971520 bytes). To fit, try: ZeRO stage 3 + optimizer and "
            "parameter offload to CPU (zero_optimization.offload_param.device: \"cpu\"); the "
            "checkpointed activations in host memory (activation_checkpointing.cpu_checkpointing: "
            "true); a smaller micro batch (train_micro_batch_size_per_gpu: 1 with "
            "gradient_accumulation_steps: 3 keeps the batch of 6); more GPUs (ZeRO divides the "
            "sharded states by the number of ranks). --estimate_memory compares the stages' "
            "model-state memory");
}

// The suggestion for each rung, from a forward pass with nothing else to advise.
std::string Ladder(int stage, engine::OffloadDevice opt, engine::OffloadDevice param) {
  TrainerConfig c = Config(stage, opt, param);
  c.model.checkpoint_every = 1;
  c.model.cpu_checkpointing = true;
  c.batch.micro_batch_size = 1;
  const std::string line = OutOfMemoryLine(c, 0, RunPhase::kForward, "CUDA out of memory.");
  const std::string from = "To fit, try: ", to = "; more GPUs";
  const size_t a = line.find(from), b = line.find(to);
  if (a == std::string::npos || b == std::string::npos || b < a) return line;
  return line.substr(a + from.size(), b - a - from.size());
}

TEST(OutOfMemoryTest, SuggestsTheNextRungOfTheLadder) {
  using engine::OffloadDevice;
  EXPECT_EQ(Ladder(1, OffloadDevice::kNone, OffloadDevice::kNone),
            "ZeRO stage 2 (zero_optimization.stage: 2)");
  EXPECT_EQ(Ladder(1, OffloadDevice::kCpu, OffloadDevice::kNone),
            "ZeRO stage 2 + optimizer offload to CPU (zero_optimization.stage: 2)");
  EXPECT_EQ(Ladder(2, OffloadDevice::kCpu, OffloadDevice::kNone),
            "ZeRO stage 3 + optimizer offload to CPU (zero_optimization.stage: 3)");
  EXPECT_EQ(Ladder(3, OffloadDevice::kNone, OffloadDevice::kNone),
            "ZeRO stage 3 + optimizer offload to CPU "
            "(zero_optimization.offload_optimizer.device: \"cpu\")");
  EXPECT_EQ(Ladder(3, OffloadDevice::kCpu, OffloadDevice::kCpu),
            "ZeRO stage 3 + optimizer and parameter offload to NVMe "
            "(zero_optimization.offload_optimizer.device: \"nvme\" with a nvme_path, "
            "zero_optimization.offload_param.device: \"nvme\" with a nvme_path)");
  // Everything already on NVMe: only more GPUs are left.
  TrainerConfig c = Config(3, OffloadDevice::kNvme, OffloadDevice::kNvme);
  c.model.checkpoint_every = 1;
  c.model.cpu_checkpointing = true;
  c.batch.micro_batch_size = 1;
  EXPECT_NE(OutOfMemoryLine(c, 0, RunPhase::kForward, "CUDA out of memory.")
                .find("LibTorch did not say how much it tried to allocate. To fit, try: more GPUs"),
            std::string::npos);
}

}  // namespace
}  // namespace zerotrain::trainer
