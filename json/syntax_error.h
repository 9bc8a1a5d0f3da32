// The words and position of a strict-JSON error: nlohmann reports where its lexer stopped and a
// grammar-level description ("syntax error while parsing object - unexpected '}'"); people
// writing a ds_config.json by hand make a handful of mistakes (trailing commas, comments, NaN,
// single quotes, truncation), and each gets named where it starts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace zerotrain::json {

// What the parser saw when it failed.
struct ParseFailure {
  size_t position = 0;    // nlohmann's count of bytes read, reading the end counted as one
  size_t token_size = 0;  // the size of nlohmann's "last token" (see TokenStart)
  int id = 0;             // nlohmann's exception id: 101 syntax, 406 number overflow
  std::string context;    // what nlohmann was parsing: "value", "object key", "object", ...
  std::string detail;     // nlohmann's description, after "while parsing <context> - "
};

// An open object or array when the failure happened, outermost first.
struct OpenContainer {
  size_t start = 0;
  bool is_object = false;
};

// Splits nlohmann's exception text ("[json.exception.parse_error.101] parse error at line 1,
// column 5: syntax error while parsing object key - ...") into failure->context and ->detail.
void SplitNlohmannMessage(const std::string& what, ParseFailure* failure);

// The byte the message points at, and what is wrong there.
struct SyntaxError {
  size_t at = 0;
  std::string why;
};
SyntaxError ExplainFailure(absl::string_view text, const ParseFailure& failure,
                           const std::vector<OpenContainer>& open);

// "<line>:<column>" of byte `at`, both from 1, the column counting bytes.
std::string LineColumn(absl::string_view text, size_t at);

// "<file>:<line>:<column>: not valid JSON: <why>", for byte `at` of `text`.
std::string FormatSyntaxError(absl::string_view text, const std::string& file, size_t at,
                              const std::string& why);

}  // namespace zerotrain::json
