// Run-time detection of AVX2/AVX-512 and the ZT_SIMD override.
#include "tools/cpu_dispatch.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace zerotrain {

const char* SimdPathName(SimdPath path) {
  switch (path) {
    case SimdPath::kAuto:
      return "auto";
    case SimdPath::kScalar:
      return "scalar";
    case SimdPath::kAvx2:
      return "avx2";
    case SimdPath::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool CpuSupports(SimdPath path) {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's cpu model also checks XGETBV, so an OS that does not save the wide registers
  // reports the feature as missing.
  __builtin_cpu_init();
  switch (path) {
    case SimdPath::kAuto:
    case SimdPath::kScalar:
      return true;
    case SimdPath::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case SimdPath::kAvx512:
      return CpuSupports(SimdPath::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return path == SimdPath::kAuto || path == SimdPath::kScalar;
#endif
}

std::vector<SimdPath> SupportedSimdPaths() {
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (CpuSupports(p)) paths.push_back(p);
  }
  return paths;
}

static absl::StatusOr<SimdPath> PathFromEnvironment(const char* value) {
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (std::strcmp(value, SimdPathName(p)) == 0) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ZT_SIMD = '", value, "' is not one of scalar, avx2, avx512"));
}

absl::StatusOr<SimdPath> ResolveSimdPath(SimdPath requested) {
  SimdPath path = requested;
  if (path == SimdPath::kAuto) {
    const char* env = std::getenv("ZT_SIMD");
    if (env != nullptr && env[0] != '\0') {
      absl::StatusOr<SimdPath> from_env = PathFromEnvironment(env);
      if (!from_env.ok()) return from_env.status();
      path = *from_env;
    } else {
      return SupportedSimdPaths().back();
    }
  }
  if (!CpuSupports(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SIMD path ", SimdPathName(path), " was forced but this processor does not support it"));
  }
  return path;
}

int ResolveThreadCount(int requested) {
  if (requested > 0) return requested;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

}  // namespace zerotrain
