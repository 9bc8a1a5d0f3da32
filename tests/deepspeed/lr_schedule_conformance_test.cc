// Every learning-rate schedule zerotrain reads from a ds_config, step by step against DeepSpeed
// 0.19.8 itself: the same JSON goes to deepspeed.initialize() (ds_oracle.py records the lr and
// Adam betas each optimizer step ran with) and through the trainer's own loading, validation and
// ForStep; both sequences must agree for 40 steps, over a grid of each schedule's parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "optim/lr_schedules.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"

namespace zerotrain::trainer {
namespace {

constexpr int kSteps = 40;

struct Case {
  std::string name;
  std::string scheduler;  // the "scheduler" section's JSON
  std::string optimizer_params = R"({"lr": 0.01})";
};

std::vector<Case> Grid() {
  std::vector<Case> cases;
  auto add = [&](const std::string& name, const std::string& type, const std::string& params) {
    cases.push_back({name, absl::StrCat(R"({"type": ")", type, R"(", "params": )", params, "}")});
  };
  add("warmup_defaults", "WarmupLR", "{}");
  for (const char* type : {"log", "linear"}) {
    for (int n : {1, 2, 7, 25}) {
      add(absl::StrFormat("warmup_%s_%d", type, n), "WarmupLR",
          absl::StrFormat(R"({"warmup_min_lr": 0.001, "warmup_max_lr": 0.02,)"
                          R"( "warmup_num_steps": %d, "warmup_type": "%s"})",
                          n, type));
      add(absl::StrFormat("decay_%s_%d", type, n), "WarmupDecayLR",
          absl::StrFormat(R"({"total_num_steps": 30, "warmup_min_lr": 0.0,)"
                          R"( "warmup_max_lr": 0.01, "warmup_num_steps": %d,)"
                          R"( "warmup_type": "%s"})",
                          n, type));
      add(absl::StrFormat("cosine_%s_%d", type, n), "WarmupCosineLR",
          absl::StrFormat(R"({"total_num_steps": 32, "warmup_min_ratio": 0.1,)"
                          R"( "cos_min_ratio": 0.05, "warmup_num_steps": %d,)"
                          R"( "warmup_type": "%s"})",
                          n, type));
    }
  }
  add("decay_short_total", "WarmupDecayLR", R"({"total_num_steps": 10, "warmup_num_steps": 12})");
  add("cosine_defaults", "WarmupCosineLR", R"({"total_num_steps": 20})");
  add("onecycle_min", "OneCycle", R"({"cycle_min_lr": 0.001, "cycle_max_lr": 0.01})");
  for (int second : {0, 7}) {
    for (int stairs : {0, 2, 3}) {
      for (bool momentum : {true, false}) {
        add(absl::StrFormat("onecycle_s%d_st%d_m%d", second, stairs, momentum), "OneCycle",
            absl::StrFormat(
                R"({"cycle_min_lr": 0.001, "cycle_max_lr": 0.01, "cycle_first_step_size": 5,)"
                R"( %s "cycle_first_stair_count": %d, "decay_step_size": 4,)"
                R"( "decay_lr_rate": 0.5, "cycle_momentum": %s, "cycle_min_mom": 0.85,)"
                R"( "cycle_max_mom": 0.95, "decay_mom_rate": 0.01})",
                second > 0 ? absl::StrFormat(R"("cycle_second_step_size": %d,)", second) : "",
                stairs, momentum ? "true" : "false"));
      }
    }
  }
  add("onecycle_no_decay", "OneCycle",
      R"({"cycle_min_lr": 0.002, "cycle_max_lr": 0.02, "cycle_first_step_size": 6})");
  for (bool staircase : {false, true}) {
    for (int size : {1, 3}) {
      add(absl::StrFormat("range_%d_%d", staircase, size), "LRRangeTest",
          absl::StrFormat(R"({"lr_range_test_min_lr": 0.0005, "lr_range_test_step_size": %d,)"
                          R"( "lr_range_test_step_rate": 2.5, "lr_range_test_staircase": %s})",
                          size, staircase ? "true" : "false"));
    }
  }
  add("range_defaults", "LRRangeTest", "{}");
  return cases;
}

std::string ConfigJson(const Case& c) {
  return absl::StrCat(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,)",
                      R"( "steps_per_print": 1000000, "optimizer": {"type": "AdamW", "params": )",
                      c.optimizer_params, R"(}, "scheduler": )", c.scheduler, "}");
}

// What zerotrain runs each step with, from the same file.
absl::StatusOr<std::vector<std::vector<double>>> Ours(const std::string& path) {
  absl::StatusOr<TrainerConfig> config = testing::LoadDsConfig(path, 1, kSteps);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<optim::LrSchedule>> schedule =
      optim::MakeLrSchedule(config->engine.lr_schedule);
  if (!schedule.ok()) return schedule.status();
  std::vector<std::vector<double>> seq;
  for (int k = 0; k < kSteps; ++k) {
    const optim::StepHyperparams h = (*schedule)->ForStep(k);
    const auto betas =
        h.betas.value_or(std::make_pair(config->engine.adam.beta1, config->engine.adam.beta2));
    seq.push_back({h.lr, betas.first, betas.second});
  }
  return seq;
}

bool Close(double a, double b) { return std::fabs(a - b) <= 1e-12 * std::max(1.0, std::fabs(b)); }

TEST(LrScheduleConformance, EveryScheduleMatchesDeepSpeedStepByStep) {
  const std::string dir = testing::OracleTempDir("lr_cases");
  const std::vector<Case> cases = Grid();
  for (const Case& c : cases) std::ofstream(dir + "/" + c.name + ".json") << ConfigJson(c);
  absl::StatusOr<std::string> oracle =
      testing::RunOracle("tests/deepspeed/ds_oracle.py", {"lr", dir, std::to_string(kSteps)});
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  absl::StatusOr<google::protobuf::Struct> theirs = testing::ParseJsonObject(*oracle);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(theirs->fields().size(), cases.size()) << *oracle;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + ": " + ConfigJson(c));
    absl::StatusOr<std::vector<std::vector<double>>> ours = Ours(dir + "/" + c.name + ".json");
    ASSERT_TRUE(ours.ok()) << ours.status();
    const std::vector<std::vector<double>> want = testing::Rows(theirs->fields().at(c.name));
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    // The first step that differs, and how many do: one line per case.
    int differing = 0;
    std::string first;
    for (int k = 0; k < kSteps; ++k) {
      const char* what[] = {"lr", "beta1", "beta2"};
      for (int v = 0; v < 3; ++v) {
        if (Close((*ours)[k][v], want[k][v])) continue;
        if (differing++ == 0) {
          first = absl::StrCat("step ", k, " ", what[v], ": zerotrain ", (*ours)[k][v],
                               ", DeepSpeed ", want[k][v]);
        }
      }
    }
    EXPECT_EQ(differing, 0) << differing << " values differ; first at " << first;
  }
}

}  // namespace
}  // namespace zerotrain::trainer
