// conformance.h: the zerotrain side of a conformance case and the oracle's JSON.
#include "tests/deepspeed/conformance.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "trainer/config/config_loader.h"

namespace zerotrain::testing {

absl::StatusOr<trainer::TrainerConfig> LoadDsConfig(const std::string& path, int world_size,
                                                    int64_t steps,
                                                    std::vector<std::string>* warnings) {
  std::vector<std::string> dropped;
  if (warnings == nullptr) warnings = &dropped;
  absl::StatusOr<TrainerConfigProto> proto =
      trainer::LoadConfigProto({.pbtxt_path = "", .ds_json_path = path}, warnings);
  if (!proto.ok()) return proto.status();
  if (steps > 0) proto->mutable_run()->set_steps(steps);
  return trainer::ValidateConfig(*proto, world_size, warnings);
}

absl::StatusOr<google::protobuf::Struct> ParseJsonObject(const std::string& text) {
  google::protobuf::Struct out;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &out);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the oracle's output is not a JSON object (",
                                                   status.ToString(), "): ", text.substr(0, 300)));
  }
  return out;
}

std::vector<double> Numbers(const google::protobuf::Value& list) {
  std::vector<double> out;
  for (const auto& v : list.list_value().values()) out.push_back(v.number_value());
  return out;
}

std::vector<std::vector<double>> Rows(const google::protobuf::Value& list) {
  std::vector<std::vector<double>> out;
  for (const auto& row : list.list_value().values()) out.push_back(Numbers(row));
  return out;
}

}  // namespace zerotrain::testing
