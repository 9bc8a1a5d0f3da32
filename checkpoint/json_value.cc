// JsonValue, IsValidUtf8 and the field accessors (json_value.h); the parser is json_parse.cc, the
// writer json_write.cc.
#include <cassert>

#include "absl/strings/str_cat.h"
#include "checkpoint/json_utf8.h"
#include "checkpoint/json_value.h"

namespace zerotrain::checkpoint {

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::Int(int64_t i) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.is_integer_ = true;
  v.int_ = i;
  v.double_ = static_cast<double>(i);
  return v;
}

JsonValue JsonValue::Double(double d) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.double_ = d;
  return v;
}

JsonValue JsonValue::String(std::string s) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.string_ = std::move(s);
  return v;
}

JsonValue JsonValue::MakeArray(Array elements) {
  JsonValue v;
  v.kind_ = Kind::kArray;
  v.array_ = std::move(elements);
  return v;
}

JsonValue JsonValue::MakeObject(Object members) {
  JsonValue v;
  v.kind_ = Kind::kObject;
  v.object_ = std::move(members);
  return v;
}

bool JsonValue::bool_value() const {
  assert(kind_ == Kind::kBool);
  return bool_;
}
int64_t JsonValue::int_value() const {
  assert(is_integer());
  return int_;
}
double JsonValue::double_value() const {
  assert(kind_ == Kind::kNumber);
  return double_;
}
const std::string& JsonValue::string_value() const {
  assert(kind_ == Kind::kString);
  return string_;
}
const JsonValue::Array& JsonValue::array() const {
  assert(kind_ == Kind::kArray);
  return array_;
}
const JsonValue::Object& JsonValue::object() const {
  assert(kind_ == Kind::kObject);
  return object_;
}

void JsonValue::Append(JsonValue element) {
  assert(kind_ == Kind::kArray);
  array_.push_back(std::move(element));
}

void JsonValue::Add(std::string key, JsonValue value) {
  assert(kind_ == Kind::kObject);
  object_.emplace_back(std::move(key), std::move(value));
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (const auto& [k, v] : object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool operator==(const JsonValue& a, const JsonValue& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case JsonValue::Kind::kNull:
      return true;
    case JsonValue::Kind::kBool:
      return a.bool_ == b.bool_;
    case JsonValue::Kind::kNumber:
      if (a.is_integer_ && b.is_integer_) return a.int_ == b.int_;
      return a.is_integer_ == b.is_integer_ && a.double_ == b.double_;
    case JsonValue::Kind::kString:
      return a.string_ == b.string_;
    case JsonValue::Kind::kArray:
      return a.array_ == b.array_;
    case JsonValue::Kind::kObject:
      return a.object_ == b.object_;
  }
  return false;
}

const char* JsonKindName(const JsonValue& value) {
  switch (value.kind()) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return "a boolean";
    case JsonValue::Kind::kNumber:
      return value.is_integer() ? "an integer" : "a number";
    case JsonValue::Kind::kString:
      return "a string";
    case JsonValue::Kind::kArray:
      return "an array";
    case JsonValue::Kind::kObject:
      return "an object";
  }
  return "?";
}

bool IsValidUtf8(absl::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = json_utf8::Utf8SequenceLength(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// ---- field accessors

namespace {

absl::Status WrongKind(absl::string_view key, const JsonValue& v, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("key \"", key, "\" is ", JsonKindName(v), ", expected ", expected));
}

// The member `key` of `obj` if it is of kind `kind` (any number for kNumber).
absl::StatusOr<const JsonValue*> FindKind(const JsonValue& obj, absl::string_view key,
                                          JsonValue::Kind kind, absl::string_view expected) {
  absl::StatusOr<const JsonValue*> v = Find(obj, key);
  if (!v.ok()) return v.status();
  if ((*v)->kind() != kind) return WrongKind(key, **v, expected);
  return *v;
}

}  // namespace

absl::StatusOr<const JsonValue*> Find(const JsonValue& obj, absl::string_view key) {
  if (obj.kind() != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an object holding key \"", key, "\", got ", JsonKindName(obj)));
  }
  const JsonValue* v = obj.Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("key \"", key, "\" is missing"));
  return v;
}

absl::StatusOr<int64_t> GetInt(const JsonValue& obj, absl::string_view key) {
  absl::StatusOr<const JsonValue*> v = Find(obj, key);
  if (!v.ok()) return v.status();
  if (!(*v)->is_integer()) return WrongKind(key, **v, "an integer");
  return (*v)->int_value();
}

absl::StatusOr<double> GetDouble(const JsonValue& obj, absl::string_view key) {
  auto v = FindKind(obj, key, JsonValue::Kind::kNumber, "a number");
  if (!v.ok()) return v.status();
  return (*v)->double_value();
}

absl::StatusOr<bool> GetBool(const JsonValue& obj, absl::string_view key) {
  auto v = FindKind(obj, key, JsonValue::Kind::kBool, "a boolean");
  if (!v.ok()) return v.status();
  return (*v)->bool_value();
}

absl::StatusOr<std::string> GetString(const JsonValue& obj, absl::string_view key) {
  auto v = FindKind(obj, key, JsonValue::Kind::kString, "a string");
  if (!v.ok()) return v.status();
  return (*v)->string_value();
}

absl::StatusOr<const JsonValue::Array*> GetArray(const JsonValue& obj, absl::string_view key) {
  auto v = FindKind(obj, key, JsonValue::Kind::kArray, "an array");
  if (!v.ok()) return v.status();
  return &(*v)->array();
}

absl::StatusOr<const JsonValue::Object*> GetObject(const JsonValue& obj, absl::string_view key) {
  auto v = FindKind(obj, key, JsonValue::Kind::kObject, "an object");
  if (!v.ok()) return v.status();
  return &(*v)->object();
}

absl::StatusOr<std::vector<int64_t>> GetIntArray(const JsonValue& obj, absl::string_view key) {
  absl::StatusOr<const JsonValue::Array*> array = GetArray(obj, key);
  if (!array.ok()) return array.status();
  std::vector<int64_t> ints;
  for (const JsonValue& element : **array) {
    if (!element.is_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("key \"", key, "\": element ", ints.size(),
                                                     " is ", JsonKindName(element),
                                                     ", expected an integer"));
    }
    ints.push_back(element.int_value());
  }
  return ints;
}

}  // namespace zerotrain::checkpoint
