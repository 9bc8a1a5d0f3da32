// What the engine's host memory holds, counted by role: a thread-local tag that the code making a
// buffer sets (MemoryRoleScope), the live bytes of each role, and how the bytes split at the
// moment of the peak. A peak says how much; the split says what to shrink (the gathered
// parameters, the gradient buckets, the optimizer states, the activations). Fed by
// engine/tensor_memory.h's counting allocator, for every CPU tensor, and by PinnedHostPool, for
// the blocks it holds. Lives here, at the bottom of the dependency graph, so that partition/ and
// engine/ can both tag what they allocate.
#pragma once

#include <array>
#include <cstdint>

namespace zerotrain::offload {

enum class MemoryRole : int {
  kOther,               // untagged: the runtime, the data, collectives' own copies
  kParameters,          // the model's parameters and their flat copies
  kGradients,           // the gradients kept for the step: flat, or this rank's shard
  kGatheredParameters,  // stage 3's parameters gathered for a forward or backward
  kGradientBuckets,     // gradients staged and reduced bucket by bucket
  kOptimizerStates,     // fp32 master weights and the optimizer's states, and copies of them
  kStaging,             // copies between the model's device and the optimizer's
  kOffloadPool,         // PinnedHostPool blocks: offloaded states, parameters, swap buffers
  kActivations,         // what a forward keeps for backward, and backward's own gradients
};
inline constexpr int kNumMemoryRoles = 9;

// "gathered parameters", "optimizer states", ...
const char* MemoryRoleName(MemoryRole role);

// The role new allocations on this thread are counted under (kOther unless a scope says).
MemoryRole CurrentMemoryRole();

// Tags this thread's allocations with `role` until it is destroyed; scopes nest.
class MemoryRoleScope {
 public:
  explicit MemoryRoleScope(MemoryRole role);
  ~MemoryRoleScope();
  MemoryRoleScope(const MemoryRoleScope&) = delete;
  MemoryRoleScope& operator=(const MemoryRoleScope&) = delete;

 private:
  MemoryRole previous_;
};

struct HostBytesByRole {
  int64_t total = 0;
  std::array<int64_t, kNumMemoryRoles> bytes{};
  MemoryRole Largest() const;  // the role holding the most; kOther when all are empty
};

// `delta` bytes allocated (> 0) or freed (< 0) under `role`. Thread-safe.
void CountHostBytes(MemoryRole role, int64_t delta);

// What is counted now, and at the most counted at once since start or the last reset (the split
// is taken when the peak is reached).
HostBytesByRole LiveHostBytes();
HostBytesByRole PeakHostBytes();
// Starts a new peak window at what is live now.
void ResetHostBytesPeak();

}  // namespace zerotrain::offload
