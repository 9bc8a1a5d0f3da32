// Formulas of DeepSpeed's LR schedules; see lr_schedules.h for each one's shape.
#include "optim/lr_schedules.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace zerotrain::optim {

// DeepSpeed's beta2 under a cycled momentum (lr_schedules.py pairs every momentum with 0.99).
constexpr double kCycledBeta2 = 0.99;

StepHyperparams LrSchedule::ForStep(int64_t steps_taken) const {
  StepHyperparams h;
  h.lr = LearningRate(steps_taken - 1);
  if (const std::optional<double> m = Momentum(steps_taken - 1)) h.betas = {{*m, kCycledBeta2}};
  return h;
}
namespace {

absl::Status CheckPositive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, " must be > 0"));
}

absl::Status CheckFinite(const char* field, double value) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, " must be finite"));
}

// Warm-up fraction in [0, 1) for iteration < steps (steps >= 2).
double WarmupFraction(WarmupType type, int64_t iteration, int64_t steps) {
  if (type == WarmupType::kLog) {
    return std::log(static_cast<double>(iteration + 1)) / std::log(static_cast<double>(steps));
  }
  return static_cast<double>(iteration) / static_cast<double>(steps);
}

}  // namespace

absl::StatusOr<WarmupLR> WarmupLR::Create(const WarmupLROptions& o) {
  if (auto s = CheckPositive("warmup_num_steps", o.warmup_num_steps); !s.ok()) return s;
  if (auto s = CheckFinite("warmup_min_lr", o.warmup_min_lr); !s.ok()) return s;
  if (auto s = CheckFinite("warmup_max_lr", o.warmup_max_lr); !s.ok()) return s;
  return WarmupLR(o);
}

WarmupLR::WarmupLR(const WarmupLROptions& options)
    : options_(options), warmup_steps_(std::max<int64_t>(2, options.warmup_num_steps)) {}

double WarmupLR::WarmupGamma(int64_t iteration) const {
  return WarmupFraction(options_.warmup_type, iteration, warmup_steps_);
}

double WarmupLR::Gamma(int64_t iteration) const {
  return iteration < warmup_steps_ ? WarmupGamma(iteration) : 1.0;
}

double WarmupLR::LearningRate(int64_t iteration) const {
  if (iteration < 0) return options_.warmup_min_lr;
  return options_.warmup_min_lr +
         (options_.warmup_max_lr - options_.warmup_min_lr) * Gamma(iteration);
}

absl::StatusOr<WarmupDecayLR> WarmupDecayLR::Create(const WarmupDecayLROptions& o) {
  if (auto s = WarmupLR::Create(o.warmup).status(); !s.ok()) return s;
  if (auto s = CheckPositive("total_num_steps", o.total_num_steps); !s.ok()) return s;
  return WarmupDecayLR(o);
}

WarmupDecayLR::WarmupDecayLR(const WarmupDecayLROptions& options)
    : WarmupLR(options.warmup), total_num_steps_(options.total_num_steps) {}

double WarmupDecayLR::Gamma(int64_t iteration) const {
  if (iteration < warmup_steps_) return WarmupGamma(iteration);
  const double left = static_cast<double>(total_num_steps_ - iteration);
  const double span = std::max<double>(1.0, static_cast<double>(total_num_steps_ - warmup_steps_));
  return std::max(0.0, left / span);
}

absl::StatusOr<WarmupCosineLR> WarmupCosineLR::Create(const WarmupCosineLROptions& o) {
  if (auto s = CheckPositive("warmup_num_steps", o.warmup_num_steps); !s.ok()) return s;
  if (auto s = CheckPositive("total_num_steps", o.total_num_steps); !s.ok()) return s;
  if (auto s = CheckFinite("lr", o.lr); !s.ok()) return s;
  if (auto s = CheckFinite("warmup_min_ratio", o.warmup_min_ratio); !s.ok()) return s;
  if (auto s = CheckFinite("cos_min_ratio", o.cos_min_ratio); !s.ok()) return s;
  return WarmupCosineLR(o);
}

WarmupCosineLR::WarmupCosineLR(const WarmupCosineLROptions& options)
    : options_(options), warmup_steps_(std::max<int64_t>(2, options.warmup_num_steps)) {}

double WarmupCosineLR::Ratio(int64_t iteration) const {
  if (iteration < 0) return 0.0;
  if (iteration < warmup_steps_) {
    const double fraction = WarmupFraction(options_.warmup_type, iteration, warmup_steps_);
    return options_.warmup_min_ratio + fraction * (1.0 - options_.warmup_min_ratio);
  }
  const double done = static_cast<double>(iteration - warmup_steps_ + 1);
  const double span =
      std::max<double>(1.0, static_cast<double>(options_.total_num_steps - warmup_steps_));
  const double progress = std::min(1.0, done / span);
  const double cosine = (1.0 + std::cos(M_PI * progress)) / 2.0;
  return std::max(0.0, options_.cos_min_ratio + (1.0 - options_.cos_min_ratio) * cosine);
}

double WarmupCosineLR::LearningRate(int64_t iteration) const {
  return options_.lr * Ratio(iteration);
}

absl::StatusOr<OneCycle> OneCycle::Create(const OneCycleOptions& o) {
  if (auto s = CheckPositive("cycle_first_step_size", o.cycle_first_step_size); !s.ok()) return s;
  if (o.cycle_second_step_size.has_value()) {
    if (auto s = CheckPositive("cycle_second_step_size", *o.cycle_second_step_size); !s.ok()) {
      return s;
    }
  }
  if (o.cycle_first_stair_count < 0 || o.cycle_second_stair_count.value_or(0) < 0 ||
      o.decay_step_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stair counts (", o.cycle_first_stair_count, ", ", o.cycle_second_stair_count.value_or(0),
        ") and decay_step_size (", o.decay_step_size, ") must be >= 0"));
  }
  return OneCycle(o);
}

OneCycle::OneCycle(const OneCycleOptions& options)
    : options_(options),
      first_(static_cast<double>(options.cycle_first_step_size)),
      second_(static_cast<double>(
          options.cycle_second_step_size.value_or(options.cycle_first_step_size))),
      total_(first_ + second_),
      second_stairs_(options.cycle_second_stair_count.value_or(options.cycle_first_stair_count)) {}

double OneCycle::ScaleFactor(int64_t iteration) const {
  const double batch = static_cast<double>(iteration + 1);
  const double x = 1.0 + batch / total_ - std::floor(1.0 + batch / total_);
  const double ratio = first_ / total_;
  const bool rising = x <= ratio;
  const double scale = rising ? x / ratio : (x - 1.0) / (ratio - 1.0);
  const int64_t stairs = rising ? options_.cycle_first_stair_count : second_stairs_;
  if (stairs <= 0) return scale;
  // Staircase: position counted from the integer batch offset so a float just under a stair
  // boundary does not drop a whole stair.
  const double in_cycle = std::fmod(batch, total_);
  const double position =
      in_cycle <= first_ ? in_cycle * stairs / first_ : (total_ - in_cycle) * stairs / second_;
  return std::floor(position) / static_cast<double>(stairs);
}

double OneCycle::LearningRate(int64_t iteration) const {
  const OneCycleOptions& o = options_;
  if (iteration < 0) return o.cycle_min_lr;
  if (iteration < total_) {
    return o.cycle_min_lr + (o.cycle_max_lr - o.cycle_min_lr) * ScaleFactor(iteration);
  }
  if (o.decay_step_size == 0 || o.decay_lr_rate == 0.0) return o.cycle_min_lr;
  const double k = static_cast<double>(iteration - total_ + 1) / o.decay_step_size;
  return o.cycle_min_lr / (1.0 + o.decay_lr_rate * k);
}

std::optional<double> OneCycle::Momentum(int64_t iteration) const {
  const OneCycleOptions& o = options_;
  if (!o.cycle_momentum) return std::nullopt;
  if (iteration < 0) return o.cycle_min_mom;
  if (iteration < total_) {
    return o.cycle_max_mom - (o.cycle_max_mom - o.cycle_min_mom) * ScaleFactor(iteration);
  }
  if (o.decay_step_size == 0 || o.decay_mom_rate == 0.0) return o.cycle_max_mom;
  const double k = static_cast<double>(iteration - total_ + 1) / o.decay_step_size;
  return o.cycle_max_mom * (1.0 + o.decay_mom_rate * k);
}

absl::StatusOr<LRRangeTest> LRRangeTest::Create(const LRRangeTestOptions& o) {
  if (auto s = CheckPositive("lr_range_test_step_size", o.lr_range_test_step_size); !s.ok()) {
    return s;
  }
  if (auto s = CheckFinite("lr_range_test_min_lr", o.lr_range_test_min_lr); !s.ok()) return s;
  return LRRangeTest(o);
}

double LRRangeTest::LearningRate(int64_t iteration) const {
  double interval = static_cast<double>(iteration + 1) / options_.lr_range_test_step_size;
  if (options_.lr_range_test_staircase) interval = std::floor(interval);
  return options_.lr_range_test_min_lr * (1.0 + options_.lr_range_test_step_rate * interval);
}

namespace {

// One overload per schedule, so MakeLrSchedule's visitor is a single generic lambda.
auto Create(const WarmupLROptions& o) { return WarmupLR::Create(o); }
auto Create(const WarmupDecayLROptions& o) { return WarmupDecayLR::Create(o); }
auto Create(const WarmupCosineLROptions& o) { return WarmupCosineLR::Create(o); }
auto Create(const OneCycleOptions& o) { return OneCycle::Create(o); }
auto Create(const LRRangeTestOptions& o) { return LRRangeTest::Create(o); }

}  // namespace

absl::StatusOr<std::unique_ptr<LrSchedule>> MakeLrSchedule(const LrScheduleOptions& options) {
  using Result = absl::StatusOr<std::unique_ptr<LrSchedule>>;
  return std::visit(
      [](const auto& o) -> Result {
        if constexpr (std::is_same_v<std::decay_t<decltype(o)>, std::monostate>) {
          return std::unique_ptr<LrSchedule>();  // constant lr
        } else {
          auto made = Create(o);
          if (!made.ok()) return made.status();
          using Schedule = typename decltype(made)::value_type;
          return std::unique_ptr<LrSchedule>(std::make_unique<Schedule>(*std::move(made)));
        }
      },
      options);
}

}  // namespace zerotrain::optim
