// Bytes of CPU tensors that LibTorch holds, counted at its CPU allocator: live now and the
// high-water mark. RSS mixes these with what glibc retains after a free and with the process's
// code and libraries; this is the engine's live set alone, so a test can hold each stage and phase
// to what it should hold, and the trainer can tell retention from live data. Also the call that
// hands freed pages back to the system, so RSS stays close to that live set.
#pragma once

#include <cstdint>

#include "offload/memory_roles.h"

namespace zerotrain::engine {

// The roles allocations are counted under, named here too, so that an application tags its own
// allocations (the trainer's activations) through the engine's API alone.
using offload::MemoryRole;
using offload::MemoryRoleScope;

// Wraps LibTorch's CPU allocator with a counting one, once per process (later calls do nothing).
// Each allocation is also counted under the allocating thread's offload::MemoryRole
// (offload/memory_roles.h), so offload::PeakHostBytes() says what the peak was made of.
// Blocks of 128 KiB and more are then mapped by the counter itself (engine/mapped_block_cache.h),
// freed ones kept for reuse only while all it maps stays within 1/16 of the most ever live at
// once: glibc would keep them in heaps that do not shrink, and RSS within a step would stand far
// above the live set.
// Tensors allocated before the first call are not counted, before or after they are freed, so
// call it before building the model. Engine::Create calls it too, so an engine's own buffers are
// always mapped this way.
void InstallCpuTensorCounter();
bool CpuTensorCounterInstalled();

// Bytes of counted CPU tensor storage alive now, and the most alive at once since the install or
// the last ResetCpuTensorPeak (which sets the peak to what is alive now). Zero before the install.
int64_t CpuTensorBytes();
int64_t CpuTensorPeakBytes();
void ResetCpuTensorPeak();

// The process's resident bytes now (/proc/self/statm), what the live set above is held against;
// -1 where that cannot be read.
int64_t ResidentHostBytes();

// Gives the pages of freed host memory back to the system: the cache of mapped blocks above, and
// glibc's free pages (malloc_trim, every arena) for what the counter does not map or what was
// allocated before its install. SaveCheckpoint and Engine::Create call it, and //trainer:main
// after each eval: where the live set is at its low and what comes next allocates other sizes.
// It costs the page faults of touching those pages again. Fixing glibc's thresholds instead
// (mallopt) cost the default run 15-20% in mapping and unmapping every mid-sized tensor, without
// a cache to reuse them.
void ReturnFreedHostMemory();
// What Engine::Step calls at each optimizer step: the same, but the cached blocks that the step
// just freed stay for the next one, which takes them again (MappedBlockCache::ReleaseIdle).
// Unmapping them each step cost a GPT-2 forward from Python 20% of its time in page faults.
// Peak RSS is the same either way: the cache never maps more than the most ever live at once
// (and 1/16); RSS between steps is the live set and the blocks the last step freed.
void ReturnIdleHostMemory();

}  // namespace zerotrain::engine
