// scheduler {type, params} → LrScheduleOptions and the schedule itself (config_schedule.h).
#include "trainer/config/config_schedule.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::FieldDescriptor;

const std::vector<std::string> kWarmup = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                          "warmup_type"};

// The parameters each type takes, DeepSpeed's constructor arguments minus the optimizer.
std::vector<std::string> Allowed(const std::string& type) {
  std::vector<std::string> names;
  if (type == "WarmupLR") names = kWarmup;
  if (type == "WarmupDecayLR") names = kWarmup, names.push_back("total_num_steps");
  if (type == "WarmupCosineLR") {
    names = {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio",
             "warmup_type"};
  }
  if (type == "OneCycle") {
    names = {"cycle_min_lr",
             "cycle_max_lr",
             "decay_lr_rate",
             "cycle_first_step_size",
             "cycle_second_step_size",
             "cycle_first_stair_count",
             "cycle_second_stair_count",
             "decay_step_size",
             "cycle_momentum",
             "cycle_min_mom",
             "cycle_max_mom",
             "decay_mom_rate"};
  }
  if (type == "LRRangeTest") {
    names = {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate",
             "lr_range_test_staircase"};
  }
  names.push_back("last_batch_iteration");
  return names;
}

absl::StatusOr<engine::WarmupType> WarmupTypeOf(const SchedulerParams& p) {
  if (!p.has_warmup_type() || p.warmup_type() == "log") return engine::WarmupType::kLog;
  if (p.warmup_type() == "linear") return engine::WarmupType::kLinear;
  return absl::InvalidArgumentError(absl::StrCat("scheduler.params.warmup_type = \"",
                                                 p.warmup_type(), "\": expected log or linear"));
}

// DeepSpeed's warm-up schedules run max(2, warmup_num_steps) steps and take any count, 0 included
// (what Hugging Face's "auto" gives without warm-up); the effective config shows the count run.
int64_t WarmupSteps(const SchedulerParams& p) { return std::max<int64_t>(2, p.warmup_num_steps()); }

// `default_max_lr`: WarmupLR warms up to the optimizer's lr when warmup_max_lr is left out
// (its default is None in 0.19.8); WarmupDecayLR passes its own default, 0.001.
absl::StatusOr<engine::WarmupLROptions> Warmup(const SchedulerParams& p, double default_max_lr,
                                               SchedulerParams* e) {
  engine::WarmupLROptions o;
  if (p.has_warmup_min_lr()) o.warmup_min_lr = p.warmup_min_lr();
  o.warmup_max_lr = p.has_warmup_max_lr() ? p.warmup_max_lr() : default_max_lr;
  if (p.has_warmup_num_steps()) o.warmup_num_steps = WarmupSteps(p);
  ZT_ASSIGN_OR_RETURN(o.warmup_type, WarmupTypeOf(p));
  e->set_warmup_min_lr(o.warmup_min_lr);
  e->set_warmup_max_lr(o.warmup_max_lr);
  e->set_warmup_num_steps(o.warmup_num_steps);
  e->set_warmup_type(o.warmup_type == engine::WarmupType::kLog ? "log" : "linear");
  return o;
}

absl::StatusOr<engine::WarmupCosineLROptions> Cosine(const SchedulerParams& p, double lr,
                                                     int64_t steps, SchedulerParams* e) {
  engine::WarmupCosineLROptions o;
  o.lr = lr;
  o.total_num_steps = p.has_total_num_steps() ? p.total_num_steps() : steps;
  if (p.has_warmup_min_ratio()) o.warmup_min_ratio = p.warmup_min_ratio();
  if (p.has_warmup_num_steps()) o.warmup_num_steps = WarmupSteps(p);
  if (p.has_cos_min_ratio()) o.cos_min_ratio = p.cos_min_ratio();
  ZT_ASSIGN_OR_RETURN(o.warmup_type, WarmupTypeOf(p));
  e->set_total_num_steps(o.total_num_steps);
  e->set_warmup_min_ratio(o.warmup_min_ratio);
  e->set_warmup_num_steps(o.warmup_num_steps);
  e->set_cos_min_ratio(o.cos_min_ratio);
  e->set_warmup_type(o.warmup_type == engine::WarmupType::kLog ? "log" : "linear");
  return o;
}

engine::OneCycleOptions Cycle(const SchedulerParams& p, SchedulerParams* e) {
  engine::OneCycleOptions o;
  // Each present field overrides the default; the effective section lists them all.
#define ZT_ONE_CYCLE(name)               \
  if (p.has_##name()) o.name = p.name(); \
  e->set_##name(o.name)
  ZT_ONE_CYCLE(cycle_min_lr);
  ZT_ONE_CYCLE(cycle_max_lr);
  ZT_ONE_CYCLE(decay_lr_rate);
  ZT_ONE_CYCLE(cycle_first_step_size);
  ZT_ONE_CYCLE(cycle_first_stair_count);
  ZT_ONE_CYCLE(decay_step_size);
  ZT_ONE_CYCLE(cycle_momentum);
  ZT_ONE_CYCLE(cycle_min_mom);
  ZT_ONE_CYCLE(cycle_max_mom);
  ZT_ONE_CYCLE(decay_mom_rate);
#undef ZT_ONE_CYCLE
  if (p.has_cycle_second_step_size()) o.cycle_second_step_size = p.cycle_second_step_size();
  if (p.has_cycle_second_stair_count()) o.cycle_second_stair_count = p.cycle_second_stair_count();
  return o;
}

engine::LRRangeTestOptions RangeTest(const SchedulerParams& p, SchedulerParams* e) {
  engine::LRRangeTestOptions o;
  if (p.has_lr_range_test_min_lr()) o.lr_range_test_min_lr = p.lr_range_test_min_lr();
  if (p.has_lr_range_test_step_size()) o.lr_range_test_step_size = p.lr_range_test_step_size();
  if (p.has_lr_range_test_step_rate()) o.lr_range_test_step_rate = p.lr_range_test_step_rate();
  if (p.has_lr_range_test_staircase()) o.lr_range_test_staircase = p.lr_range_test_staircase();
  e->set_lr_range_test_min_lr(o.lr_range_test_min_lr);
  e->set_lr_range_test_step_size(o.lr_range_test_step_size);
  e->set_lr_range_test_step_rate(o.lr_range_test_step_rate);
  e->set_lr_range_test_staircase(o.lr_range_test_staircase);
  return o;
}

// DeepSpeed looks the type up by its exact name; any case is accepted here.
absl::StatusOr<std::string> CanonicalType(const std::string& type) {
  for (const char* known :
       {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"}) {
    if (absl::EqualsIgnoreCase(type, known)) return std::string(known);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "scheduler.type = \"", type,
      "\": unknown scheduler (known: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, "
      "LRRangeTest)"));
}

}  // namespace

absl::StatusOr<LrScheduleOptions> ScheduleFromConfig(const SchedulerConfig& config,
                                                     double optimizer_lr, int64_t run_steps,
                                                     SchedulerConfig* effective) {
  LrScheduleOptions out;
  if (!config.has_type()) {
    if (config.params().ByteSizeLong() > 0) {
      return absl::InvalidArgumentError("scheduler.params is set but scheduler.type is not");
    }
    return out;
  }
  ZT_ASSIGN_OR_RETURN(out.type, CanonicalType(config.type()));
  const SchedulerParams& p = config.params();
  std::vector<const FieldDescriptor*> set;
  p.GetReflection()->ListFields(p, &set);
  const std::vector<std::string> allowed = Allowed(out.type);
  for (const FieldDescriptor* fd : set) {
    if (std::find(allowed.begin(), allowed.end(), fd->name()) == allowed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler.params.", fd->name(), ": not a parameter of ", out.type,
                       " (it takes ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  if (p.has_last_batch_iteration() && p.last_batch_iteration() != -1) {
    return absl::UnimplementedError(absl::StrCat(
        "scheduler.params.last_batch_iteration = ", p.last_batch_iteration(),
        ": not supported; a resumed run (run.resume_from) continues the schedule from the "
        "checkpoint's step"));
  }
  effective->set_type(out.type);
  SchedulerParams* e = effective->mutable_params();
  e->Clear();
  if (out.type == "WarmupLR") {
    ZT_ASSIGN_OR_RETURN(out.options, Warmup(p, optimizer_lr, e));
  } else if (out.type == "WarmupDecayLR") {
    engine::WarmupDecayLROptions o;
    ZT_ASSIGN_OR_RETURN(o.warmup, Warmup(p, engine::WarmupLROptions().warmup_max_lr, e));
    o.total_num_steps = p.has_total_num_steps() ? p.total_num_steps() : run_steps;
    e->set_total_num_steps(o.total_num_steps);
    out.options = o;
  } else if (out.type == "WarmupCosineLR") {
    ZT_ASSIGN_OR_RETURN(out.options, Cosine(p, optimizer_lr, run_steps, e));
  } else if (out.type == "OneCycle") {
    out.options = Cycle(p, e);
  } else {
    out.options = RangeTest(p, e);
  }
  if (const absl::Status s = engine::CheckLrSchedule(out.options); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler (", out.type, "): ", s.message()));
  }
  return out;
}

}  // namespace zerotrain::trainer
