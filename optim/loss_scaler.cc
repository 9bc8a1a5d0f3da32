// LossScaler's update rule, following DeepSpeed's DynamicLossScaler.update_scale.
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace zerotrain::optim {

namespace {
constexpr double kScaleFactor = 2.0;  // DeepSpeed fixes the factor at 2
}  // namespace

absl::StatusOr<LossScaler> LossScaler::Create(const LossScalerOptions& o) {
  if (!(o.loss_scale >= 0) || !std::isfinite(o.loss_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale = ", o.loss_scale, " must be 0 (dynamic) or a finite scale > 0"));
  }
  if (o.loss_scale > 0) return LossScaler(o, false, o.loss_scale);
  if (o.initial_scale_power < 0 || o.initial_scale_power > 126) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial_scale_power = ", o.initial_scale_power, " is outside [0, 126]"));
  }
  if (o.loss_scale_window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale_window = ", o.loss_scale_window, " must be >= 1"));
  }
  if (o.hysteresis < 1) {
    return absl::InvalidArgumentError(absl::StrCat("hysteresis = ", o.hysteresis, " must be >= 1"));
  }
  if (!(o.min_loss_scale > 0) || !std::isfinite(o.min_loss_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_loss_scale = ", o.min_loss_scale, " must be finite and > 0"));
  }
  return LossScaler(o, true, std::ldexp(1.0, o.initial_scale_power));
}

LossScaler::LossScaler(const LossScalerOptions& options, bool dynamic, double scale)
    : options_(options), dynamic_(dynamic), state_{scale, 0, -1, options.hysteresis} {}

absl::Status LossScaler::Restore(const State& state) {
  if (!(state.scale > 0) || !std::isfinite(state.scale) || state.iteration < 0 ||
      state.hysteresis_left < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LossScaler state {scale = ", state.scale, ", iteration = ", state.iteration,
                     ", hysteresis_left = ", state.hysteresis_left, "} is not a valid state"));
  }
  state_ = state;
  return absl::OkStatus();
}

absl::Status LossScaler::Update(bool overflow) {
  if (!dynamic_) return absl::OkStatus();
  State& s = state_;
  if (overflow) {
    if (options_.hysteresis == 1 || s.hysteresis_left == 1) {
      if (s.scale == options_.min_loss_scale && options_.raise_error_at_min_scale) {
        return absl::FailedPreconditionError(absl::StrCat(
            "gradient overflow at iteration ", s.iteration,
            " with the loss scale already at "
            "min_loss_scale = ",
            options_.min_loss_scale,
            ": it cannot be decreased any more (training diverged or min_loss_scale is too high)"));
      }
      s.scale = std::max(s.scale / kScaleFactor, options_.min_loss_scale);
    } else {
      --s.hysteresis_left;
    }
    s.last_overflow_iteration = s.iteration;
  } else {
    if (options_.consecutive_hysteresis) s.hysteresis_left = options_.hysteresis;
    // Steps since the last overflow, not counting this one: the scale grows once every
    // loss_scale_window clean steps.
    const int64_t stable = s.iteration - s.last_overflow_iteration - 1;
    if (stable > 0 && stable % options_.loss_scale_window == 0) {
      if (!options_.consecutive_hysteresis) s.hysteresis_left = options_.hysteresis;
      s.scale *= kScaleFactor;
    }
  }
  ++s.iteration;
  return absl::OkStatus();
}

}  // namespace zerotrain::optim
