// ResolveSimdPath: auto picks the widest supported path, ZT_SIMD overrides it, and a
// forced path the processor lacks is an error rather than a silent fallback.
#include "tools/cpu_dispatch.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace zerotrain {
namespace {

class ScopedEnv {
 public:
  explicit ScopedEnv(const char* value) {
    if (value)
      setenv("ZT_SIMD", value, 1);
    else
      unsetenv("ZT_SIMD");
  }
  ~ScopedEnv() { unsetenv("ZT_SIMD"); }
};

TEST(CpuDispatchTest, AutoTakesTheWidestSupportedPath) {
  ScopedEnv env(nullptr);
  const std::vector<SimdPath> paths = SupportedSimdPaths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), SimdPath::kScalar);
  absl::StatusOr<SimdPath> path = ResolveSimdPath(SimdPath::kAuto);
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(*path, paths.back());
  if (CpuSupports(SimdPath::kAvx512)) {
    EXPECT_EQ(*path, SimdPath::kAvx512);
  }
}

TEST(CpuDispatchTest, EnvironmentOverridesAuto) {
  ScopedEnv env("scalar");
  EXPECT_EQ(*ResolveSimdPath(SimdPath::kAuto), SimdPath::kScalar);
  // An explicit request in the options wins over the environment.
  if (CpuSupports(SimdPath::kAvx2)) {
    EXPECT_EQ(*ResolveSimdPath(SimdPath::kAvx2), SimdPath::kAvx2);
  }
}

TEST(CpuDispatchTest, BadEnvironmentValueIsAnError) {
  ScopedEnv env("sse9");
  absl::StatusOr<SimdPath> path = ResolveSimdPath(SimdPath::kAuto);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("ZT_SIMD = 'sse9'"), std::string::npos);
}

TEST(CpuDispatchTest, ForcingAnUnsupportedPathFails) {
  ScopedEnv env(nullptr);
  for (SimdPath p : {SimdPath::kAvx2, SimdPath::kAvx512}) {
    absl::StatusOr<SimdPath> path = ResolveSimdPath(p);
    EXPECT_EQ(path.ok(), CpuSupports(p)) << SimdPathName(p);
    if (!path.ok()) {
      EXPECT_EQ(path.status().code(), absl::StatusCode::kFailedPrecondition);
    }
  }
}

TEST(CpuDispatchTest, ThreadCount) {
  EXPECT_EQ(ResolveThreadCount(3), 3);
  EXPECT_GE(ResolveThreadCount(0), 1);
}

}  // namespace
}  // namespace zerotrain
