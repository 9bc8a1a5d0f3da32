// fp16 loss scaling against DeepSpeed 0.19.8 itself: the same ds_config's fp16 section builds
// DeepSpeed's scaler (CreateLossScaler, as its ZeRO optimizers call it; ds_oracle.py) and
// zerotrain's (the trainer's loading and validation, then optim::LossScaler), both are fed one
// scripted overflow pattern, and the scale and hysteresis of every step, and the step at which
// the scaler gives up at the minimum scale, must be the same.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "optim/loss_scaler.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"

namespace zerotrain::trainer {
namespace {

struct Sequence {
  std::vector<double> scales;
  std::vector<int> hysteresis;
  int raised = -1;
};

struct Case {
  std::string name;
  std::string fp16;     // the fp16 section's JSON
  std::string pattern;  // one 0/1 per step, 1 = overflow
};

std::vector<Case> Grid() {
  // Bursts, isolated overflows, long clean runs (growth), and a run into the minimum scale.
  const std::vector<std::string> patterns = {
      "0000000000000000000000000000000000000000", "1000000000000100000000000000011000000000",
      "0110111100000011000000000001010101010000", "1111111111111111111111111111111111111111",
      "0010010010010010010010010010010010010010",
  };
  std::vector<Case> cases;
  for (size_t p = 0; p < patterns.size(); ++p) {
    for (int hysteresis : {1, 2, 3}) {
      for (bool consecutive : {false, true}) {
        for (int window : {1, 3}) {
          cases.push_back({absl::StrFormat("p%d_h%d_c%d_w%d", p, hysteresis, consecutive, window),
                           absl::StrFormat(R"({"enabled": true, "initial_scale_power": 6,)"
                                           R"( "loss_scale_window": %d, "hysteresis": %d,)"
                                           R"( "consecutive_hysteresis": %s, "min_loss_scale": 2})",
                                           window, hysteresis, consecutive ? "true" : "false"),
                           patterns[p]});
        }
      }
    }
  }
  cases.push_back({"defaults", R"({"enabled": true})", patterns[2]});
  cases.push_back({"static", R"({"enabled": true, "loss_scale": 128})", patterns[2]});
  return cases;
}

std::string ConfigJson(const Case& c) {
  return absl::StrCat(R"({"train_micro_batch_size_per_gpu": 1, "fp16": )", c.fp16,
                      R"(, "pattern": ")", c.pattern, R"("})");
}

absl::StatusOr<Sequence> Ours(const std::string& path, const std::string& pattern) {
  absl::StatusOr<TrainerConfig> config = testing::LoadDsConfig(path, 1);
  if (!config.ok()) return config.status();
  absl::StatusOr<optim::LossScaler> scaler = optim::LossScaler::Create(config->engine.fp16);
  if (!scaler.ok()) return scaler.status();
  Sequence s;
  for (size_t step = 0; step < pattern.size(); ++step) {
    s.scales.push_back(scaler->scale());
    s.hysteresis.push_back(scaler->dynamic() ? scaler->state().hysteresis_left : 0);
    if (!scaler->Update(pattern[step] == '1').ok()) {
      s.raised = static_cast<int>(step);
      break;
    }
  }
  return s;
}

// The oracle's {"scales": [...], "hysteresis": [...], "raised": n} for one case.
Sequence Theirs(const google::protobuf::Value& v) {
  const auto& f = v.struct_value().fields();
  Sequence s;
  s.scales = testing::Numbers(f.at("scales"));
  for (double h : testing::Numbers(f.at("hysteresis"))) s.hysteresis.push_back(static_cast<int>(h));
  s.raised = static_cast<int>(f.at("raised").number_value());
  return s;
}

TEST(LossScalerConformance, ScaleAndHysteresisFollowDeepSpeedUnderScriptedOverflows) {
  const std::string dir = testing::OracleTempDir("scaler_cases");
  const std::vector<Case> cases = Grid();
  for (const Case& c : cases) std::ofstream(dir + "/" + c.name + ".json") << ConfigJson(c);
  absl::StatusOr<std::string> oracle =
      testing::RunOracle("tests/deepspeed/ds_oracle.py", {"scaler", dir});
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  absl::StatusOr<google::protobuf::Struct> theirs = testing::ParseJsonObject(*oracle);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(theirs->fields().size(), cases.size()) << *oracle;
  int gave_up = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + ": " + ConfigJson(c));
    absl::StatusOr<Sequence> ours = Ours(dir + "/" + c.name + ".json", c.pattern);
    ASSERT_TRUE(ours.ok()) << ours.status();
    const Sequence want = Theirs(theirs->fields().at(c.name));
    EXPECT_EQ(ours->scales, want.scales);
    EXPECT_EQ(ours->hysteresis, want.hysteresis);
    EXPECT_EQ(ours->raised, want.raised);
    gave_up += want.raised >= 0;
  }
  EXPECT_GT(gave_up, 0);  // the grid reaches the minimum scale somewhere
}

}  // namespace
}  // namespace zerotrain::trainer
