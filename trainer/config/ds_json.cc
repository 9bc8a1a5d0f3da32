// ds_config.json → TrainerConfigProto (see ds_json.h). The JSON is first read strictly
// (json/strict_json.h) into a google.protobuf.Value, rewritten (deprecated keys) and checked field
// by field against the descriptor (types, integral numbers, "auto", unknown keys); the cleaned tree
// then goes through protobuf's own JSON parser, which fills the message.
#include "trainer/config/ds_json.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "json/strict_json.h"
#include "tools/status_macros.h"
#include "trainer/config/ds_json_compat.h"
#include "trainer/config/ds_keys.h"
#include "trainer/config/field_names.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Struct;
using google::protobuf::Value;

struct WalkState {
  std::string file;
  std::vector<std::string> unknown;
  std::vector<std::string> auto_fields;
};

// protobuf 3.21 has its own Status type.
template <typename ProtobufStatus>
std::string ProtobufMessage(const ProtobufStatus& s) {
  return std::string(s.message().data(), s.message().size());
}

absl::Status FieldError(const WalkState& s, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(s.file, ": ", path, ": ", why));
}

// Integer fields take any JSON number with an integral value in range (Python's json reads 5e8
// as a float, and DeepSpeed casts it); protobuf's parser gets it as a decimal string.
absl::StatusOr<Value> IntegerValue(const WalkState& s, const std::string& path,
                                   const FieldDescriptor* fd, double d) {
  double lo = -9.2e18, hi = 9.2e18;
  if (fd->cpp_type() == FieldDescriptor::CPPTYPE_INT32) lo = INT32_MIN, hi = INT32_MAX;
  if (fd->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) lo = 0, hi = UINT32_MAX;
  if (fd->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) lo = 0, hi = 1.8e19;
  if (!std::isfinite(d) || d != std::floor(d)) {
    return FieldError(s, path, absl::StrCat("expected an integer, got ", d));
  }
  Value out;
  // 2^63 is what Python's sys.maxsize (2^63 - 1, DeepSpeed's "no limit", e.g. the default of
  // stage3_model_persistence_threshold) becomes as a JSON double: read it as INT64_MAX.
  if (fd->cpp_type() == FieldDescriptor::CPPTYPE_INT64 && d == 9223372036854775808.0) {
    out.set_string_value("9223372036854775807");
    return out;
  }
  if (d < lo || d > hi) return FieldError(s, path, absl::StrCat(d, " is out of range"));
  out.set_string_value(absl::StrFormat("%.0f", d));
  return out;
}

// The strict parse's tree as the google.protobuf.Value the walk below reads; numbers become
// doubles, as protobuf's own JSON reader makes them.
Value ToProtoValue(const json::Json& j) {
  Value v;
  if (j.is_null()) {
    v.set_null_value(google::protobuf::NULL_VALUE);
  } else if (j.is_boolean()) {
    v.set_bool_value(j.get<bool>());
  } else if (j.is_number()) {
    v.set_number_value(j.get<double>());
  } else if (j.is_string()) {
    v.set_string_value(j.get<std::string>());
  } else if (j.is_array()) {
    auto* list = v.mutable_list_value();
    for (const json::Json& element : j) *list->add_values() = ToProtoValue(element);
  } else {
    auto* fields = v.mutable_struct_value()->mutable_fields();
    for (const auto& [key, value] : j.get_ref<const json::Json::object_t&>()) {
      (*fields)[key] = ToProtoValue(value);
    }
  }
  return v;
}

absl::Status Walk(WalkState* s, const std::string& prefix, const Descriptor* d, const Struct& in,
                  Struct* out);

absl::StatusOr<Value> CheckScalar(WalkState* s, const std::string& path, const FieldDescriptor* fd,
                                  const Value& v) {
  const auto expected = [&](const char* what) {
    return FieldError(*s, path, absl::StrCat("expected ", what, ", got ", JsonText(v)));
  };
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      if (!v.has_bool_value()) return expected("true or false");
      return v;
    case FieldDescriptor::CPPTYPE_STRING:
      if (!v.has_string_value()) return expected("a string");
      return v;
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      if (!v.has_number_value()) return expected("a number");
      return v;
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      if (!v.has_struct_value()) return expected("an object");
      Value out;
      ZT_RETURN_IF_ERROR(
          Walk(s, path + ".", fd->message_type(), v.struct_value(), out.mutable_struct_value()));
      return out;
    }
    default:  // the integer types
      if (!v.has_number_value()) return expected("an integer");
      return IntegerValue(*s, path, fd, v.number_value());
  }
}

absl::Status Walk(WalkState* s, const std::string& prefix, const Descriptor* d, const Struct& in,
                  Struct* out) {
  std::vector<std::string> keys;
  for (const auto& [key, unused] : in.fields()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());  // the map's order is unspecified; messages must not be
  for (const std::string& key : keys) {
    const Value& v = in.fields().at(key);
    const std::string path = prefix + key;
    const FieldDescriptor* fd = d->FindFieldByName(key);
    if (fd == nullptr) {
      // DeepSpeed passes these to a constructor, where an unknown keyword is a TypeError.
      if (prefix == "optimizer.params." || prefix == "scheduler.params.") {
        return FieldError(*s, path,
                          absl::StrCat("not a parameter of any ", prefix.substr(0, 9),
                                       " type zerotrain has (DeepSpeed's constructor would "
                                       "reject it too)"));
      }
      s->unknown.push_back(path + DidYouMean(*d, key));
      continue;
    }
    if (v.has_null_value()) continue;  // DeepSpeed reads null as "use the default"
    if (v.has_string_value() && v.string_value() == "auto") {
      s->auto_fields.push_back(path);
      continue;
    }
    if (!fd->is_repeated()) {
      ZT_ASSIGN_OR_RETURN((*out->mutable_fields())[key], CheckScalar(s, path, fd, v));
      continue;
    }
    if (!v.has_list_value()) {
      return FieldError(*s, path, absl::StrCat("expected a list, got ", JsonText(v)));
    }
    Value& list = (*out->mutable_fields())[key];
    list.mutable_list_value();
    for (int i = 0; i < v.list_value().values_size(); ++i) {
      ZT_ASSIGN_OR_RETURN(
          *list.mutable_list_value()->add_values(),
          CheckScalar(s, absl::StrCat(path, "[", i, "]"), fd, v.list_value().values(i)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DsJson> ParseDsJson(const std::string& text, const std::string& file) {
  ZT_ASSIGN_OR_RETURN(const json::Json parsed, json::ParseStrict(text, file));
  Value root = ToProtoValue(parsed);
  if (!root.has_struct_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": expected a JSON object at the top level, got ", JsonText(root)));
  }
  DsJson result;
  ZT_RETURN_IF_ERROR(RewriteDeprecatedKeys(file, root.mutable_struct_value(), &result.warnings));
  WalkState state{std::string(file), {}, {}};
  ZT_RETURN_IF_ERROR(ResolveDeepSpeedKeys(file, root.mutable_struct_value(), &state.unknown));
  Value clean;
  ZT_RETURN_IF_ERROR(Walk(&state, "", TrainerConfigProto::descriptor(), root.struct_value(),
                          clean.mutable_struct_value()));
  if (!state.unknown.empty()) {
    std::sort(state.unknown.begin(), state.unknown.end());
    result.warnings.push_back(
        absl::StrCat(file, ": ignoring unknown key(s) ", absl::StrJoin(state.unknown, ", ")));
  }
  result.auto_fields = std::move(state.auto_fields);

  std::string clean_text;
  auto status = google::protobuf::util::MessageToJsonString(clean, &clean_text);
  if (status.ok()) status = google::protobuf::util::JsonStringToMessage(clean_text, &result.config);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", ProtobufMessage(status)));
  }
  return result;
}

}  // namespace zerotrain::trainer
