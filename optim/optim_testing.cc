// Tolerance check and random data for optim's tests.
#include "optim/optim_testing.h"

#include <cmath>
#include <sstream>

namespace zerotrain::optim::testing {

::testing::AssertionResult AllClose(const float* ours, const float* theirs, int64_t n,
                                    double abs_tol, double rel_tol) {
  int64_t bad = 0;
  std::ostringstream msg;
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(ours[i]) - theirs[i]);
    const double tol = abs_tol + rel_tol * std::fabs(static_cast<double>(theirs[i]));
    if (!(diff <= tol)) {
      if (bad < 5) msg << "\n  [" << i << "] ours " << ours[i] << " theirs " << theirs[i];
      ++bad;
      worst = std::fmax(worst, diff / tol);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " elements differ (worst " << worst
                                       << "x the tolerance):" << msg.str();
}

std::vector<float> RandomNormal(int64_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::string PathLabel(SimdPath path) { return SimdPathName(path); }

GradBuffers::GradBuffers(DType dtype) : dtype(dtype), f32(RandomNormal(50012, 9, 100.0f)) {
  Sync();
}

void GradBuffers::Sync() {
  if (dtype == DType::kFloat32) return;
  low.resize(f32.size());
  ConvertFromFloat(f32.data(), low.data(), dtype, static_cast<int64_t>(f32.size()));
}

std::vector<GradShard> GradBuffers::Shards() const {
  const char* base = dtype == DType::kFloat32 ? reinterpret_cast<const char*>(f32.data())
                                              : reinterpret_cast<const char*>(low.data());
  const int size = DTypeSize(dtype);
  return {{base, 0, dtype}, {base, 50003, dtype}, {base + 50003 * size, 9, dtype}};
}

}  // namespace zerotrain::optim::testing
