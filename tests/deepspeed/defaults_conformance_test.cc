// The values a ds_config resolves to where it leaves keys out, against DeepSpeed 0.19.8 itself:
// DeepSpeedConfig reads each file (ds_oracle.py defaults, which names the keys zerotrain shares
// with it by zerotrain's dotted field names), and the trainer's own loading and validation give
// the effective configuration --print_config prints; every shared value must be the same.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The effective config's value at a dotted path, as a number (bools 0/1); false if absent.
bool ValueAt(const Message& root, const std::string& path, double* out) {
  const Message* m = &root;
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* fd = m->GetDescriptor()->FindFieldByName(parts[i]);
    if (fd == nullptr || fd->is_repeated()) return false;
    const auto* r = m->GetReflection();
    if (i + 1 < parts.size()) {
      if (fd->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return false;
      m = &r->GetMessage(*m, fd);
      continue;
    }
    switch (fd->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL:
        *out = r->GetBool(*m, fd);
        return true;
      case FieldDescriptor::CPPTYPE_INT32:
        *out = r->GetInt32(*m, fd);
        return true;
      case FieldDescriptor::CPPTYPE_INT64:
        *out = static_cast<double>(r->GetInt64(*m, fd));
        return true;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        *out = r->GetDouble(*m, fd);
        return true;
      case FieldDescriptor::CPPTYPE_FLOAT:
        *out = r->GetFloat(*m, fd);
        return true;
      default:
        return false;
    }
  }
  return false;
}

// Sections present with their keys left out, at every stage, with each offload and precision.
std::vector<std::pair<std::string, std::string>> Cases() {
  std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", "{}"},
      {"fp16", R"({"fp16": {"enabled": true}})"},
      {"bf16", R"({"bf16": {"enabled": true}})"},
  };
  for (int stage = 0; stage <= 3; ++stage) {
    cases.push_back({absl::StrCat("stage", stage),
                     absl::StrCat(R"({"zero_optimization": {"stage": )", stage, "}}")});
  }
  cases.push_back({"offload_cpu", R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}})"});
  cases.push_back({"offload_param", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})"});
  return cases;
}

TEST(DefaultsConformance, ResolvedValuesMatchDeepSpeed) {
  const std::string dir = testing::OracleTempDir("defaults");
  const auto cases = Cases();
  for (const auto& [name, sections] : cases) {
    // The sections plus the one batch key both need.
    std::string json = sections;
    json.insert(
        1, std::string(R"("train_micro_batch_size_per_gpu": 1)") + (sections == "{}" ? "" : ", "));
    std::ofstream(dir + "/" + name + ".json") << json;
  }
  absl::StatusOr<std::string> oracle =
      testing::RunOracle("tests/deepspeed/ds_oracle.py", {"defaults", dir});
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  absl::StatusOr<google::protobuf::Struct> theirs = testing::ParseJsonObject(*oracle);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(theirs->fields().size(), cases.size()) << *oracle;
  for (const auto& [name, sections] : cases) {
    SCOPED_TRACE(name + ": " + sections);
    absl::StatusOr<TrainerConfig> ours = testing::LoadDsConfig(dir + "/" + name + ".json", 1);
    ASSERT_TRUE(ours.ok()) << ours.status();
    const auto& want = theirs->fields().at(name).struct_value().fields();
    EXPECT_GT(want.size(), 20u);
    for (const auto& [path, value] : want) {
      double got = 0;
      ASSERT_TRUE(ValueAt(ours->effective, path, &got)) << "no field " << path;
      const double expected = value.has_bool_value() ? value.bool_value() : value.number_value();
      EXPECT_EQ(got, expected) << path << ": zerotrain " << got << ", DeepSpeed " << expected;
    }
  }
}

}  // namespace
}  // namespace zerotrain::trainer
