// Chooses the vector instruction set that the CPU kernels (optim/ and comm/) run with, at run
// time, so one binary runs on any x86-64: AVX-512 where the processor has it, else AVX2+FMA(+F16C),
// else scalar.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain {

enum class SimdPath { kAuto, kScalar, kAvx2, kAvx512 };

const char* SimdPathName(SimdPath path);

// Whether this processor (and OS) can run `path`; kScalar and kAuto always can.
bool CpuSupports(SimdPath path);

// The concrete paths this machine supports, widest last; tests force each in turn.
std::vector<SimdPath> SupportedSimdPaths();

// Resolves `requested` to a concrete path. kAuto takes the environment variable
// ZT_SIMD (scalar | avx2 | avx512) when set, else the widest supported path. Forcing a
// path the processor lacks is an error, not a silent fallback, so a test that asked for AVX-512
// never passes while running something else.
absl::StatusOr<SimdPath> ResolveSimdPath(SimdPath requested);

// Threads a kernel uses for `requested` (0 = every core the OS reports).
int ResolveThreadCount(int requested);

}  // namespace zerotrain
