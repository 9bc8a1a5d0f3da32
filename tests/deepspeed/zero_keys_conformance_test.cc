// zero_optimization's keys against DeepSpeed 0.19.8's own config model: the list of fields comes
// from DeepSpeed at test time (ds_oracle.py zero_fields), so a key DeepSpeed has and zerotrain
// silently drops cannot go unnoticed. Every field, under its name and its alias, at DeepSpeed's
// default, must load in zerotrain without an "unknown key" warning; misspelt keys must be refused
// by both; a value zerotrain cannot honour must be refused with a line naming the key.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"

namespace zerotrain::trainer {
namespace {

std::string Json(const google::protobuf::Value& v) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

std::string WriteCase(const std::string& dir, const std::string& name, const std::string& zero) {
  const std::string path = absl::StrCat(dir, "/", name, ".json");
  std::ofstream(path) << R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": )" << zero
                      << "}";
  return path;
}

TEST(ZeroKeysConformance, EveryDeepSpeedKeyAtItsDefaultLoads) {
  absl::StatusOr<std::string> fields_json =
      testing::RunOracle("tests/deepspeed/ds_oracle.py", {"zero_fields"});
  ASSERT_TRUE(fields_json.ok()) << fields_json.status();
  absl::StatusOr<google::protobuf::Struct> fields = testing::ParseJsonObject(*fields_json);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_GT(fields->fields().size(), 30u) << *fields_json;  // 0.19.8 has 44
  const std::string dir = testing::OracleTempDir("zero_fields");
  std::vector<std::string> silently_dropped, refused;
  for (const auto& [name, info] : fields->fields()) {
    const auto& f = info.struct_value().fields();
    std::vector<std::string> spellings = {name};
    if (!f.at("alias").string_value().empty()) spellings.push_back(f.at("alias").string_value());
    for (const std::string& key : spellings) {
      const std::string path =
          WriteCase(dir, key, absl::StrCat("{\"", key, "\": ", Json(f.at("default")), "}"));
      std::vector<std::string> warnings;
      absl::StatusOr<TrainerConfig> c = testing::LoadDsConfig(path, 1, 0, &warnings);
      if (!c.ok()) {
        refused.push_back(absl::StrCat(key, " (", c.status().message(), ")"));
        continue;
      }
      for (const std::string& w : warnings) {
        if (absl::StrContains(w, "unknown key") && absl::StrContains(w, key)) {
          silently_dropped.push_back(key);
        }
      }
    }
  }
  EXPECT_TRUE(refused.empty()) << "DeepSpeed's defaults refused: " << absl::StrJoin(refused, "; ");
  EXPECT_TRUE(silently_dropped.empty())
      << "DeepSpeed keys dropped as unknown: " << absl::StrJoin(silently_dropped, ", ");
}

TEST(ZeroKeysConformance, MisspeltKeysAreRefusedByBoth) {
  const std::string dir = testing::OracleTempDir("zero_typos");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"overlap", R"({"stage": 2, "overlap_com": true})"},
      {"bucket", R"({"reduce_bucket": 1000})"},
      {"stage3", R"({"stage": 3, "stage3_prefetch_bucket": 1000})"},
      {"offload", R"({"offload_optimiser": {"device": "cpu"}})"},
  };
  for (const auto& [name, zero] : cases) WriteCase(dir, name, zero);
  absl::StatusOr<std::string> verdicts =
      testing::RunOracle("tests/deepspeed/ds_oracle.py", {"accepts", dir});
  ASSERT_TRUE(verdicts.ok()) << verdicts.status();
  absl::StatusOr<google::protobuf::Struct> theirs = testing::ParseJsonObject(*verdicts);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  for (const auto& [name, zero] : cases) {
    SCOPED_TRACE(zero);
    EXPECT_TRUE(absl::StartsWith(theirs->fields().at(name).string_value(), "error"))
        << "DeepSpeed accepted it: " << theirs->fields().at(name).string_value();
    absl::StatusOr<TrainerConfig> ours = testing::LoadDsConfig(dir + "/" + name + ".json", 1);
    ASSERT_FALSE(ours.ok());
    EXPECT_TRUE(absl::StrContains(ours.status().message(), "unknown key")) << ours.status();
  }
}

TEST(ZeroKeysConformance, UnhonouredValuesAreRefusedNamingTheKey) {
  const std::string dir = testing::OracleTempDir("zero_refused");
  const std::string path = WriteCase(dir, "legacy", R"({"stage": 1, "legacy_stage1": true})");
  absl::StatusOr<std::string> verdicts =
      testing::RunOracle("tests/deepspeed/ds_oracle.py", {"accepts", dir});
  ASSERT_TRUE(verdicts.ok()) << verdicts.status();
  EXPECT_NE(verdicts->find("\"ok\""), std::string::npos) << *verdicts;  // DeepSpeed takes it
  absl::StatusOr<TrainerConfig> ours = testing::LoadDsConfig(path, 1);
  ASSERT_FALSE(ours.ok());
  EXPECT_TRUE(absl::StrContains(ours.status().message(),
                                "zero_optimization.legacy_stage1 = true: not supported"))
      << ours.status();
}

}  // namespace
}  // namespace zerotrain::trainer
