// A small strict JSON (RFC 8259) value, parser and writer for the files checkpoints exchange with
// the Python ecosystem: safetensors headers, model.safetensors.index.json, config.json. No torch
// dependency, so any package may read its configuration with it.
//
// Objects keep their keys in file order (a safetensors header is written in a fixed order) and a
// duplicate key is an error, not "last one wins". Numbers remember whether they were written as
// integers and then keep their exact int64 value: data offsets and element counts may pass 2^53,
// where a double would silently round.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zerotrain::checkpoint {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<JsonValue>;
  using Object = std::vector<std::pair<std::string, JsonValue>>;

  JsonValue() = default;  // null
  static JsonValue Bool(bool b);
  static JsonValue Int(int64_t i);
  static JsonValue Double(double d);
  static JsonValue String(std::string s);
  static JsonValue MakeArray(Array elements = {});
  static JsonValue MakeObject(Object members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_integer() const { return kind_ == Kind::kNumber && is_integer_; }

  // Each accessor expects its kind (checked by assert); the Get* functions below check instead.
  bool bool_value() const;
  int64_t int_value() const;    // an integer number
  double double_value() const;  // any number; an integer converted
  const std::string& string_value() const;
  const Array& array() const;
  const Object& object() const;

  void Append(JsonValue element);  // to an array
  // Adds a member to an object. Unchecked, so that building a header of many tensors stays
  // linear: the caller keeps keys unique (ParseJson refuses duplicates).
  void Add(std::string key, JsonValue value);
  // The member named `key` of an object (a linear search), or nullptr (also for a non-object).
  const JsonValue* Find(absl::string_view key) const;

  // Same kind and value; numbers compare as integers when both are, else as doubles.
  friend bool operator==(const JsonValue& a, const JsonValue& b);
  friend bool operator!=(const JsonValue& a, const JsonValue& b) { return !(a == b); }

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  bool is_integer_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  Array array_;
  Object object_;
};

// "null", "a boolean", "an integer", "a number", "a string", "an array", "an object".
const char* JsonKindName(const JsonValue& value);

// Parses one JSON text (surrounding whitespace allowed). Errors are InvalidArgument and read
// "<what>: byte <offset>: <problem>". Strings must be valid UTF-8; \u escapes (surrogate pairs
// included) become UTF-8. Nesting deeper than kMaxJsonDepth is refused, not recursed into.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text, const std::string& what);
constexpr int kMaxJsonDepth = 128;

// JSON text for `value`. indent 0: compact, no spaces (as serde_json and the safetensors header);
// indent > 0: one member per line, ": " after keys (as Python's json.dumps(indent=n)). Integers
// are written as integers; doubles in the fewest digits that read back to the same double, with
// ".0" added when that looks like an integer; non-finite doubles, which JSON lacks, as null.
std::string WriteJson(const JsonValue& value, int indent);

bool IsValidUtf8(absl::string_view bytes);

// Field accessors for an object. Errors name the key: NotFound `key "k" is missing`,
// InvalidArgument `key "k" is a string, expected an integer` (also when `obj` is no object).
absl::StatusOr<const JsonValue*> Find(const JsonValue& obj, absl::string_view key);
absl::StatusOr<int64_t> GetInt(const JsonValue& obj, absl::string_view key);
absl::StatusOr<double> GetDouble(const JsonValue& obj, absl::string_view key);  // ints too
absl::StatusOr<bool> GetBool(const JsonValue& obj, absl::string_view key);
absl::StatusOr<std::string> GetString(const JsonValue& obj, absl::string_view key);
absl::StatusOr<const JsonValue::Array*> GetArray(const JsonValue& obj, absl::string_view key);
absl::StatusOr<const JsonValue::Object*> GetObject(const JsonValue& obj, absl::string_view key);
// An array of integers; an error names the key and the index of the first element that is not.
absl::StatusOr<std::vector<int64_t>> GetIntArray(const JsonValue& obj, absl::string_view key);

}  // namespace zerotrain::checkpoint
