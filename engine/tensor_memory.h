// Bytes of CPU tensors that LibTorch holds, counted at its CPU allocator: live now and the
// high-water mark. RSS mixes these with what glibc retains after a free and with the process's
// code and libraries; this is the engine's live set alone, so a test can hold each stage and phase
// to what it should hold, and the trainer can tell retention from live data. Also the call that
// hands freed pages back to the system, so RSS stays close to that live set.
#pragma once

#include <cstdint>

namespace zerotrain::engine {

// Wraps LibTorch's CPU allocator with a counting one, once per process (later calls do nothing).
// Each allocation is also counted under the allocating thread's offload::MemoryRole
// (offload/memory_roles.h), so offload::PeakHostBytes() says what the peak was made of.
// Tensors allocated before the first call are not counted, before or after they are freed, so
// call it before building the model.
void InstallCpuTensorCounter();
bool CpuTensorCounterInstalled();

// Bytes of counted CPU tensor storage alive now, and the most alive at once since the install or
// the last ResetCpuTensorPeak (which sets the peak to what is alive now). Zero before the install.
int64_t CpuTensorBytes();
int64_t CpuTensorPeakBytes();
void ResetCpuTensorPeak();

// Gives the pages of freed host memory back to the system (glibc's malloc_trim, every arena).
// glibc keeps what the engine frees: its threshold for mapping large blocks rises after the first
// large free, so later gather, gradient and bucket buffers come from heaps that never shrink, and
// a stage 3 rank of a 101M-parameter GPT held 3.0 GiB after four steps for a live set of 0.9 GiB.
// Called once per optimizer step (//trainer:main does, after Step), it costs the page faults of
// touching those pages again in the next step. Fixing glibc's thresholds instead (mallopt) cost
// the default run 15-20% in mapping and unmapping every mid-sized tensor.
void ReturnFreedHostMemory();

}  // namespace zerotrain::engine
