// Bytes of CPU tensors that LibTorch holds, counted at its CPU allocator: live now and the
// high-water mark. RSS mixes these with what glibc retains after a free and with the process's
// code and libraries; this is the engine's live set alone, so a test can hold each stage and phase
// to what it should hold, and the trainer can tell retention from live data.
#pragma once

#include <cstdint>

namespace zerotrain::engine {

// Wraps LibTorch's CPU allocator with a counting one, once per process (later calls do nothing).
// Tensors allocated before the first call are not counted, before or after they are freed, so
// call it before building the model.
void InstallCpuTensorCounter();
bool CpuTensorCounterInstalled();

// Bytes of counted CPU tensor storage alive now, and the most alive at once since the install or
// the last ResetCpuTensorPeak (which sets the peak to what is alive now). Zero before the install.
int64_t CpuTensorBytes();
int64_t CpuTensorPeakBytes();
void ResetCpuTensorPeak();

}  // namespace zerotrain::engine
