// Reading fields of a parsed JSON object with errors that name the key, and writing JSON in the
// layouts the Python and Rust ecosystems write (json.dumps, serde_json), over nlohmann-json.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zerotrain::json {

using Json = nlohmann::ordered_json;

// "null", "a boolean", "an integer", "a number", "a string", "an array", "an object".
const char* KindName(const Json& value);

// Field accessors for an object. Errors name the key: NotFound `key "k" is missing`,
// InvalidArgument `key "k" is a string, expected an integer` (or, when `obj` is no object,
// `expected an object holding key "k", got an array`).
absl::StatusOr<const Json*> Find(const Json& obj, absl::string_view key);
absl::StatusOr<int64_t> GetInt(const Json& obj, absl::string_view key);
absl::StatusOr<double> GetDouble(const Json& obj, absl::string_view key);  // integers too
absl::StatusOr<bool> GetBool(const Json& obj, absl::string_view key);
absl::StatusOr<std::string> GetString(const Json& obj, absl::string_view key);
absl::StatusOr<const Json*> GetArray(const Json& obj, absl::string_view key);
absl::StatusOr<const Json*> GetObject(const Json& obj, absl::string_view key);
// An array of integers; an error names the key and the index of the first element that is not.
absl::StatusOr<std::vector<int64_t>> GetIntArray(const Json& obj, absl::string_view key);

// JSON text for `value`. indent 0: compact, no spaces (serde_json, the safetensors header);
// indent > 0: one member per line with ": " after keys (json.dumps(indent=n)). Non-ASCII text is
// written as UTF-8; doubles in the fewest digits that read back the same, ".0" added to look
// like a double; NaN and infinities, which JSON lacks, as null. Strings must be valid UTF-8
// (IsValidUtf8): one that is not is a broken invariant of the caller (CHECK).
std::string Write(const Json& value, int indent);

bool IsValidUtf8(absl::string_view bytes);

}  // namespace zerotrain::json
