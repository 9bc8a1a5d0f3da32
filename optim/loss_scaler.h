// Mixed-precision loss scaling with DeepSpeed's fp16 semantics: a static scale, or a dynamic one
// that halves on overflow (after `hysteresis` overflows) and doubles after `loss_scale_window`
// overflow-free steps. Field names are those of DeepSpeed's "fp16" config block.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zerotrain::optim {

struct LossScalerOptions {
  double loss_scale = 0.0;       // 0 = dynamic; > 0 = this static scale
  int initial_scale_power = 16;  // dynamic scale starts at 2^initial_scale_power
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;                   // overflows tolerated before the scale drops
  bool consecutive_hysteresis = false;  // refill hysteresis on every overflow-free step
  double min_loss_scale = 1.0;
  bool raise_error_at_min_scale = true;
};

class LossScaler {
 public:
  // What a checkpoint must save to resume the schedule exactly.
  struct State {
    double scale;
    int64_t iteration;
    int64_t last_overflow_iteration;
    int hysteresis_left;
  };

  static absl::StatusOr<LossScaler> Create(const LossScalerOptions& options);

  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }
  const State& state() const { return state_; }
  absl::Status Restore(const State& state);

  // Records one step's outcome (overflow = some rank saw inf/NaN; the step is then skipped).
  // Fails with FAILED_PRECONDITION, as DeepSpeed raises, when an overflow arrives while the
  // scale is already at min_loss_scale and raise_error_at_min_scale is set. Static scalers
  // ignore the outcome.
  absl::Status Update(bool overflow);

 private:
  LossScaler(const LossScalerOptions& options, bool dynamic, double scale);

  LossScalerOptions options_;
  bool dynamic_;
  State state_;
};

}  // namespace zerotrain::optim
