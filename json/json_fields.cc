// Field accessors and the writer (see json_fields.h).
#include "json/json_fields.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace zerotrain::json {
namespace {

absl::Status WrongKind(absl::string_view key, const Json& v, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("key \"", key, "\" is ", KindName(v), ", expected ", expected));
}

// The member `key` of `obj` when `is_kind` holds for it.
absl::StatusOr<const Json*> FindKind(const Json& obj, absl::string_view key,
                                     bool (Json::*is_kind)() const noexcept,
                                     absl::string_view expected) {
  absl::StatusOr<const Json*> v = Find(obj, key);
  if (!v.ok()) return v.status();
  if (!((**v).*is_kind)()) return WrongKind(key, **v, expected);
  return *v;
}

}  // namespace

const char* KindName(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "binary data";
}

absl::StatusOr<const Json*> Find(const Json& obj, absl::string_view key) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an object holding key \"", key, "\", got ", KindName(obj)));
  }
  const auto it = obj.find(std::string(key));
  if (it == obj.end()) return absl::NotFoundError(absl::StrCat("key \"", key, "\" is missing"));
  return &*it;
}

absl::StatusOr<int64_t> GetInt(const Json& obj, absl::string_view key) {
  absl::StatusOr<const Json*> v = Find(obj, key);
  if (!v.ok()) return v.status();
  const Json& j = **v;
  // ParseStrict keeps every integer an int64; a value built in code may be an unsigned one.
  if (j.is_number_unsigned() &&
      j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("key \"", key, "\" is beyond int64's range"));
  }
  if (!j.is_number_integer()) return WrongKind(key, j, "an integer");
  return j.get<int64_t>();
}

absl::StatusOr<double> GetDouble(const Json& obj, absl::string_view key) {
  absl::StatusOr<const Json*> v = FindKind(obj, key, &Json::is_number, "a number");
  if (!v.ok()) return v.status();
  return (*v)->get<double>();
}

absl::StatusOr<bool> GetBool(const Json& obj, absl::string_view key) {
  absl::StatusOr<const Json*> v = FindKind(obj, key, &Json::is_boolean, "a boolean");
  if (!v.ok()) return v.status();
  return (*v)->get<bool>();
}

absl::StatusOr<std::string> GetString(const Json& obj, absl::string_view key) {
  absl::StatusOr<const Json*> v = FindKind(obj, key, &Json::is_string, "a string");
  if (!v.ok()) return v.status();
  return (*v)->get<std::string>();
}

absl::StatusOr<const Json*> GetArray(const Json& obj, absl::string_view key) {
  return FindKind(obj, key, &Json::is_array, "an array");
}

absl::StatusOr<const Json*> GetObject(const Json& obj, absl::string_view key) {
  return FindKind(obj, key, &Json::is_object, "an object");
}

absl::StatusOr<std::vector<int64_t>> GetIntArray(const Json& obj, absl::string_view key) {
  absl::StatusOr<const Json*> array = GetArray(obj, key);
  if (!array.ok()) return array.status();
  std::vector<int64_t> ints;
  for (const Json& element : **array) {
    if (!element.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("key \"", key, "\": element ", ints.size(),
                                                     " is ", KindName(element),
                                                     ", expected an integer"));
    }
    ints.push_back(element.get<int64_t>());
  }
  return ints;
}

std::string Write(const Json& value, int indent) {
  try {
    return value.dump(indent > 0 ? indent : -1);
  } catch (const Json::type_error& e) {
    LOG(FATAL) << "json::Write: " << e.what() << " (strings must be valid UTF-8)";
  }
}

bool IsValidUtf8(absl::string_view bytes) {
  // nlohmann's serializer validates UTF-8 as it writes; a string is valid when it writes.
  try {
    (void)Json(std::string(bytes)).dump();
    return true;
  } catch (const Json::type_error&) {
    return false;
  }
}

}  // namespace zerotrain::json
