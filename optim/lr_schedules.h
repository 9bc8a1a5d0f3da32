// DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py) as pure functions of
// the iteration, with DeepSpeed's parameter names. `iteration` is DeepSpeed's
// last_batch_iteration: -1 before the first scheduler.step() (the value the constructor sets),
// then 0, 1, ... DeepSpeed's engine steps the scheduler after each optimizer step it takes, so
// the step taken after k earlier ones runs with iteration k - 1's values: ForStep(k).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <variant>

#include "absl/status/statusor.h"

namespace zerotrain::optim {

enum class WarmupType { kLog, kLinear };

// What the optimizer runs with for one step.
struct StepHyperparams {
  double lr = 0;
  // When the schedule cycles momentum (OneCycle): Adam's betas. DeepSpeed writes the pair
  // (momentum, 0.99) into the param group, so beta2 becomes 0.99 whatever the optimizer had.
  std::optional<std::pair<double, double>> betas;
};

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double LearningRate(int64_t iteration) const = 0;
  // Adam's beta1 when the schedule cycles it (OneCycle); else none.
  virtual std::optional<double> Momentum(int64_t iteration) const { return std::nullopt; }
  // For the optimizer step taken after `steps_taken` earlier ones (skipped fp16 steps do not
  // count: DeepSpeed does not step its scheduler on them).
  StepHyperparams ForStep(int64_t steps_taken) const;
};

struct WarmupLROptions {
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;  // DeepSpeed uses max(2, warmup_num_steps)
  WarmupType warmup_type = WarmupType::kLog;
};

// min_lr + (max_lr - min_lr) * gamma, gamma = log(it + 1) / log(N) or it / N while it < N, then 1.
class WarmupLR : public LrSchedule {
 public:
  static absl::StatusOr<WarmupLR> Create(const WarmupLROptions& options);
  double LearningRate(int64_t iteration) const override;

 protected:
  explicit WarmupLR(const WarmupLROptions& options);
  // The warm-up fraction while iteration < warmup_steps_, else the subclass's decay.
  virtual double Gamma(int64_t iteration) const;
  double WarmupGamma(int64_t iteration) const;

  WarmupLROptions options_;
  int64_t warmup_steps_;
};

struct WarmupDecayLROptions {
  int64_t total_num_steps = 0;
  WarmupLROptions warmup;
};

// WarmupLR, then linear decay to 0 at total_num_steps: gamma = max(0, (T - it) / max(1, T - N)).
class WarmupDecayLR : public WarmupLR {
 public:
  static absl::StatusOr<WarmupDecayLR> Create(const WarmupDecayLROptions& options);

 protected:
  double Gamma(int64_t iteration) const override;

 private:
  WarmupDecayLR(const WarmupDecayLROptions& options);
  int64_t total_num_steps_;
};

struct WarmupCosineLROptions {
  double lr = 0.001;  // the optimizer's base lr, which DeepSpeed reads from the param group
  int64_t total_num_steps = 0;
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;  // max(2, .) as in DeepSpeed
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::kLog;
};

// lr * ratio: warm-up from warmup_min_ratio to 1, then a half cosine down to cos_min_ratio at
// total_num_steps, held there afterwards. Before the first step the ratio is 0.
class WarmupCosineLR : public LrSchedule {
 public:
  static absl::StatusOr<WarmupCosineLR> Create(const WarmupCosineLROptions& options);
  double LearningRate(int64_t iteration) const override;
  double Ratio(int64_t iteration) const;

 private:
  explicit WarmupCosineLR(const WarmupCosineLROptions& options);
  WarmupCosineLROptions options_;
  int64_t warmup_steps_;
};

struct OneCycleOptions {
  double cycle_min_lr = 0.0;
  double cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;  // default: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // default: cycle_first_stair_count
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
};

// One triangle of lr from cycle_min_lr up to cycle_max_lr and back (momentum moving the other
// way, max to min and back), then decay: lr = min_lr / (1 + decay_lr_rate * k / decay_step_size)
// and momentum = max_mom * (1 + decay_mom_rate * k / decay_step_size) for the k-th step past it.
class OneCycle : public LrSchedule {
 public:
  static absl::StatusOr<OneCycle> Create(const OneCycleOptions& options);
  double LearningRate(int64_t iteration) const override;
  std::optional<double> Momentum(int64_t iteration) const override;

 private:
  explicit OneCycle(const OneCycleOptions& options);
  double ScaleFactor(int64_t iteration) const;  // 0 at the cycle's ends, 1 at its peak
  OneCycleOptions options_;
  double first_, second_, total_;
  int64_t second_stairs_;
};

struct LRRangeTestOptions {
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

// min_lr * (1 + step_rate * x), x = (it + 1) / step_size, floored when staircase.
class LRRangeTest : public LrSchedule {
 public:
  static absl::StatusOr<LRRangeTest> Create(const LRRangeTestOptions& options);
  double LearningRate(int64_t iteration) const override;

 private:
  explicit LRRangeTest(const LRRangeTestOptions& options) : options_(options) {}
  LRRangeTestOptions options_;
};

// DeepSpeed's scheduler section: one of the schedules above by its options; std::monostate is a
// constant lr (no scheduler).
using LrScheduleOptions = std::variant<std::monostate, WarmupLROptions, WarmupDecayLROptions,
                                       WarmupCosineLROptions, OneCycleOptions, LRRangeTestOptions>;

// The schedule `options` describe (its Create's checks), or nullptr for std::monostate.
absl::StatusOr<std::unique_ptr<LrSchedule>> MakeLrSchedule(const LrScheduleOptions& options);

}  // namespace zerotrain::optim
