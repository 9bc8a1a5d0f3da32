// Scalar: one named value of one training step, the unit every metrics writer takes; and the
// wall clock the writers stamp rows with.
#pragma once

#include <chrono>
#include <string>

namespace zerotrain::monitor {

struct Scalar {
  std::string name;  // e.g. "loss", "lr", "ms_per_step"; TensorBoard's tag, the CSV column
  double value = 0.0;
};

// Seconds since the epoch, as a double (TensorBoard's wall_time).
inline double WallTimeNow() {
  using std::chrono::system_clock;
  return std::chrono::duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace zerotrain::monitor
