// A strict JSON (RFC 8259) syntax pass over a ds_config file, run before ds_json reads it: what
// protobuf's JSON reader lets through or reports without a position (trailing commas, comments,
// NaN and Infinity, duplicate keys, truncated input) becomes one error with the file, line and
// column, so a typo is never silently read as something else.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace zerotrain::trainer {

// OK when `text` is one JSON value and nothing else; otherwise InvalidArgument reading
// "<file>:<line>:<column>: not valid JSON: <what>" (1-based; the column counts bytes).
absl::Status CheckJsonSyntax(absl::string_view text, const std::string& file);

}  // namespace zerotrain::trainer
