// Strict JSON (RFC 8259) for the files zerotrain exchanges with Python and Rust: ds_config.json,
// Hugging Face's config.json and model.safetensors.index.json, safetensors headers. nlohmann-json
// (Debian's nlohmann-json3-dev) lexes and parses; this layer adds what those files' own readers
// do and nlohmann does not: a duplicate key is an error (Python's json keeps the last, which hides
// a typo), nesting is bounded, a byte order mark is refused, and every error names the file, the
// line and column where the offending token starts, and the mistake in words
// ("ds.json:3:9: not valid JSON: a trailing comma before '}'").
//
// Values are nlohmann::ordered_json: objects keep their keys in file order (a safetensors header
// is written in a fixed order). Integers stay integers with their exact int64 value (offsets and
// element counts may pass 2^53, where a double would round); only an integer beyond int64's range
// becomes a double.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zerotrain::json {

using Json = nlohmann::ordered_json;

// Deeper nesting is refused rather than built: no file we read comes near it.
constexpr int kMaxDepth = 128;

// One JSON value (surrounding whitespace allowed). Errors are InvalidArgument, on one line:
// "<file>:<line>:<column>: not valid JSON: <what>", both from 1, the column counting bytes.
absl::StatusOr<Json> ParseStrict(absl::string_view text, const std::string& file);

}  // namespace zerotrain::json
