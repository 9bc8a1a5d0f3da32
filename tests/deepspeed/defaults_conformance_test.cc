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

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The effective config's value at a dotted path (bools as 0/1, strings as strings); false if
// absent.
bool ValueAt(const Message& root, const std::string& path, google::protobuf::Value* out) {
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
        out->set_number_value(r->GetBool(*m, fd));
        return true;
      case FieldDescriptor::CPPTYPE_INT32:
        out->set_number_value(r->GetInt32(*m, fd));
        return true;
      case FieldDescriptor::CPPTYPE_INT64:
        out->set_number_value(static_cast<double>(r->GetInt64(*m, fd)));
        return true;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        out->set_number_value(r->GetDouble(*m, fd));
        return true;
      case FieldDescriptor::CPPTYPE_FLOAT:
        out->set_number_value(r->GetFloat(*m, fd));
        return true;
      case FieldDescriptor::CPPTYPE_STRING:
        out->set_string_value(r->GetString(*m, fd));
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
  // DeepSpeed builds comms_logger's config only when the file has the section.
  cases.push_back({"sections", R"({"comms_logger": {}, "aio": {}, "checkpoint": {},
      "activation_checkpointing": {}, "tensorboard": {}, "csv_monitor": {}})"});
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
    EXPECT_GT(want.size(), 40u);
    for (const auto& [path, value] : want) {
      google::protobuf::Value got;
      ASSERT_TRUE(ValueAt(ours->effective, path, &got)) << "no field " << path;
      if (value.has_string_value()) {
        // Case aside: DeepSpeed upper-cases checkpoint.tag_validation as it reads it ("WARN");
        // both read any case.
        EXPECT_TRUE(absl::EqualsIgnoreCase(got.string_value(), value.string_value()))
            << path << ": zerotrain \"" << got.string_value() << "\", DeepSpeed \""
            << value.string_value() << "\"";
        continue;
      }
      const double expected = value.has_bool_value() ? value.bool_value() : value.number_value();
      EXPECT_EQ(got.number_value(), expected)
          << path << ": zerotrain " << got.number_value() << ", DeepSpeed " << expected;
    }
  }
}

}  // namespace
}  // namespace zerotrain::trainer
