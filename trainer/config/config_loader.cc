// Reading and merging config files (config_loader.h). "auto" resolution and default filling are
// in config_auto.cc.
#include "trainer/config/config_loader.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"
#include "trainer/config/ds_json.h"
#include "trainer/config/field_names.h"

namespace zerotrain::trainer {

extern const char kDefaultConfigPbtxt[];  // generated from configs/default.pbtxt

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr char kDefaultConfigName[] = "trainer/configs/default.pbtxt (built in)";

class ErrorList : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    errors.push_back(absl::StrCat(line + 1, ":", column + 1, ": ", message));
  }
  std::vector<std::string> errors;
};

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every field both messages set, as "path (a_value vs b_value)", sections compared key by key.
void Overlap(const Message& a, const Message& b, const std::string& prefix,
             std::vector<std::string>* out) {
  const Reflection* r = a.GetReflection();
  for (int i = 0; i < a.GetDescriptor()->field_count(); ++i) {
    const FieldDescriptor* fd = a.GetDescriptor()->field(i);
    const std::string path = prefix + fd->name();
    if (fd->is_repeated()) {
      if (r->FieldSize(a, fd) > 0 && r->FieldSize(b, fd) > 0) {
        out->push_back(absl::StrCat(path, " (", FieldText(a, fd), " and ", FieldText(b, fd), ")"));
      }
    } else if (r->HasField(a, fd) && r->HasField(b, fd)) {
      if (fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Overlap(r->GetMessage(a, fd), r->GetMessage(b, fd), path + ".", out);
      } else {
        out->push_back(absl::StrCat(path, " (", FieldText(a, fd), " and ", FieldText(b, fd), ")"));
      }
    }
  }
}

}  // namespace

std::string FieldText(const Message& m, const FieldDescriptor* fd) {
  const Reflection* r = m.GetReflection();
  std::string out, one;
  if (!fd->is_repeated()) {
    google::protobuf::TextFormat::PrintFieldValueToString(m, fd, -1, &out);
    return out;
  }
  for (int i = 0; i < r->FieldSize(m, fd); ++i) {
    google::protobuf::TextFormat::PrintFieldValueToString(m, fd, i, &one);
    absl::StrAppend(&out, i ? ", " : "[", one);
  }
  return out + "]";
}

std::string DefaultConfigPbtxt() { return kDefaultConfigPbtxt; }

absl::StatusOr<TrainerConfigProto> ParsePbtxt(const std::string& text, const std::string& file) {
  ErrorList errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  TrainerConfigProto config;
  if (!parser.ParseFromString(std::string(text), &config)) {
    if (errors.errors.empty()) errors.errors.push_back("cannot parse");
    const size_t first = text.find_first_not_of(" \t\r\n");
    const bool json = first != std::string::npos && text[first] == '{';
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":", ExplainTextFormatError(*TrainerConfigProto::descriptor(), errors.errors.front()),
        json ? " (this is JSON: a DeepSpeed ds_config.json goes to --ds_config)" : ""));
  }
  return config;
}

// A --ds_config that is not JSON but parses as our protobuf text config was given to the wrong
// flag: say which.
absl::Status HintPbtxtAsJson(absl::Status s, const std::string& text) {
  if (s.ok() || !absl::StrContains(s.message(), "not valid JSON")) return s;
  TrainerConfigProto unused;
  google::protobuf::TextFormat::Parser quiet;
  ErrorList ignored;
  quiet.RecordErrorsTo(&ignored);
  if (!quiet.ParseFromString(text, &unused)) return s;
  return absl::Status(s.code(), absl::StrCat(s.message(),
                                             " (this is a protobuf text config: "
                                             "pass it with --config)"));
}

absl::StatusOr<TrainerConfigProto> LoadConfigProto(const ConfigSources& sources,
                                                   std::vector<std::string>* warnings) {
  const bool has_json = !sources.ds_json_path.empty() || sources.ds_json_text.has_value();
  if (sources.pbtxt_path.empty() && !has_json) {
    return ParsePbtxt(DefaultConfigPbtxt(), kDefaultConfigName);
  }
  TrainerConfigProto config;
  if (!sources.pbtxt_path.empty()) {
    ZT_ASSIGN_OR_RETURN(std::string text, ReadFile(sources.pbtxt_path, "--config"));
    ZT_ASSIGN_OR_RETURN(config, ParsePbtxt(text, sources.pbtxt_path));
  }
  if (!has_json) return config;

  std::string json;
  if (sources.ds_json_text.has_value()) {
    json = *sources.ds_json_text;
  } else {
    ZT_ASSIGN_OR_RETURN(json, ReadFile(sources.ds_json_path, "--ds_config"));
  }
  auto parsed = ParseDsJson(json, sources.ds_json_path);
  if (!parsed.ok()) return HintPbtxtAsJson(parsed.status(), json);
  DsJson ds = *std::move(parsed);
  warnings->insert(warnings->end(), ds.warnings.begin(), ds.warnings.end());
  std::vector<std::string> both;
  Overlap(config, ds.config, "", &both);
  if (!both.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("set in both ", sources.pbtxt_path, " and ", sources.ds_json_path, ": ",
                     absl::StrJoin(both, "; "), ". Set each field in one file only"));
  }
  config.MergeFrom(ds.config);
  ZT_RETURN_IF_ERROR(ResolveAutoFields(ds.auto_fields, sources.ds_json_path, &config));
  return config;
}

absl::Status ApplyDeepSpeedTimeout(const char* value, TrainerConfigProto* config) {
  if (value == nullptr || config->run().has_comm_timeout_s()) return absl::OkStatus();
  constexpr int64_t kMaxMinutes = 24 * 60;  // run.comm_timeout_s's limit
  int64_t minutes = 0;
  if (!absl::SimpleAtoi(value, &minutes) || minutes < 1 || minutes > kMaxMinutes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DEEPSPEED_TIMEOUT='", value,
        "' is not a whole number of minutes in [1, 1440]; unset it or set run.comm_timeout_s "
        "(seconds) in the config"));
  }
  config->mutable_run()->set_comm_timeout_s(minutes * 60);
  return absl::OkStatus();
}

std::string PrintConfig(const TrainerConfigProto& config) {
  TrainerConfigProto effective = config;
  FillDefaults(&effective);
  std::string text;
  google::protobuf::TextFormat::PrintToString(effective, &text);
  return text;
}

}  // namespace zerotrain::trainer
