// Strict-JSON error messages (see syntax_error.h). The rules read nlohmann 3.11's wording;
// strict_json_test pins every one of them, so a new nlohmann that words things differently fails
// there rather than in a user's face.
#include "json/syntax_error.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace zerotrain::json {
namespace {

constexpr char kNotANumber[] = " is not JSON (write a number, or null)";

bool IsDigit(char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }

// The token's first byte as a reader sees it: 'x', or its hex value when not printable.
std::string Shown(absl::string_view text, size_t at) {
  if (at >= text.size()) return "the end of the input";
  const char c = text[at];
  return absl::ascii_isprint(static_cast<unsigned char>(c))
             ? absl::StrCat("'", std::string(1, c), "'")
             : absl::StrFormat("byte 0x%02x", c & 0xff);
}

// The last byte before `at` that is not JSON whitespace, or npos.
size_t PreviousNonSpace(absl::string_view text, size_t at) {
  while (at > 0) {
    const char c = text[--at];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return at;
  }
  return absl::string_view::npos;
}

// The run of letters and digits at `at` (a misspelt literal such as True or NaN).
absl::string_view WordAt(absl::string_view text, size_t at) {
  size_t end = at;
  while (end < text.size() && absl::ascii_isalnum(static_cast<unsigned char>(text[end]))) ++end;
  return text.substr(at, end - at);
}

// Where the offending token starts. nlohmann's lexer restarts its token text only at strings and
// numbers, so its "last token" measures those; true/false/null are their own length, a bracket,
// comma, colon or stray byte is the last byte read, and a misspelt word is the run of letters
// ending there (or just before it: "tru}" stops at the '}').
size_t TokenStart(absl::string_view text, const ParseFailure& f) {
  const size_t stop = std::min(f.position, text.size());
  const size_t last = stop > 0 ? stop - 1 : 0;
  const absl::string_view d = f.detail;
  const auto is_alnum = [&](size_t i) {
    return absl::ascii_isalnum(static_cast<unsigned char>(text[i]));
  };
  if (absl::StartsWith(d, "invalid literal")) {
    const size_t end = f.position > text.size() ? text.size() : last + (is_alnum(last) ? 1 : 0);
    size_t start = end;
    while (start > 0 && is_alnum(start - 1)) --start;
    return start < end ? start : last;
  }
  if (absl::StartsWith(d, "unexpected true literal") ||
      absl::StartsWith(d, "unexpected null literal")) {
    return stop >= 4 ? stop - 4 : 0;
  }
  if (absl::StartsWith(d, "unexpected false literal")) return stop >= 5 ? stop - 5 : 0;
  const bool measured = absl::StartsWith(d, "invalid string") ||
                        absl::StartsWith(d, "invalid number") || f.id == 406 ||
                        absl::StartsWith(d, "unexpected string literal") ||
                        absl::StartsWith(d, "unexpected number literal");
  if (measured) return stop >= f.token_size ? stop - f.token_size : 0;
  if (absl::StartsWith(d, "unexpected end of input")) return text.size();
  return last;
}

SyntaxError AtEnd(absl::string_view text, const ParseFailure& f,
                  const std::vector<OpenContainer>& open) {
  if (PreviousNonSpace(text, text.size()) == absl::string_view::npos) {
    return {text.size(), "the file is empty"};
  }
  if (f.context == "value" || open.empty()) {
    return {text.size(), "the input ends where a value should be (truncated?)"};
  }
  const OpenContainer& inner = open.back();
  return {text.size(),
          absl::StrCat("the input ends inside the ", inner.is_object ? "object" : "list",
                       " opened at ", LineColumn(text, inner.start), " (truncated?)")};
}

// A token the lexer could not read: a bad string, number or literal.
SyntaxError BadToken(absl::string_view text, const ParseFailure& f, size_t t) {
  const bool at_end = f.position > text.size();             // the lexer read the end
  const size_t last = f.position > 0 ? f.position - 1 : 0;  // else the byte that stopped it
  const absl::string_view d = f.detail;
  if (absl::StartsWith(d, "invalid string")) {
    if (at_end || absl::StrContains(d, "missing closing quote")) {
      return {t, "a string that never ends (truncated, or a missing '\"')"};
    }
    if (absl::StrContains(d, "control character")) {
      return {last, "a control character (a line break?) inside a string; write \\n"};
    }
    if (absl::StrContains(d, "UTF-8")) return {last, "invalid UTF-8 in a string"};
    size_t escape = last;  // the backslash that began the bad escape
    while (escape > t && text[escape] != '\\') --escape;
    if (absl::StrContains(d, "surrogate")) {
      return {escape, "an unpaired UTF-16 surrogate in a \\u escape"};
    }
    if (absl::StrContains(d, "hex digits")) return {escape, "a \\u escape needs 4 hex digits"};
    return {escape, "a bad escape in a string (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)"};
  }
  if (absl::StartsWith(d, "invalid number")) {
    if (absl::StartsWith(text.substr(t), "-Infinity"))
      return {t, absl::StrCat("-Infinity", kNotANumber)};
    if (at_end) return {text.size(), "the input ends inside a number (truncated?)"};
    if (absl::StrContains(d, "after '-'")) return {last, "a digit should follow '-'"};
    if (absl::StrContains(d, "after '.'")) return {last, "a digit should follow '.'"};
    return {last, "a digit should follow the exponent"};
  }
  if (t < text.size() && text[t] == '/') return {t, "comments are not JSON"};
  if (t < text.size() && text[t] == '\'') {
    return {t,
            f.context == "object key" ? "keys take double quotes" : "strings take double quotes"};
  }
  const absl::string_view word = WordAt(text, t);
  if (word == "NaN" || word == "Infinity") return {t, absl::StrCat(word, kNotANumber)};
  if (!word.empty()) {
    return {t,
            absl::StrCat("unexpected word '", word,
                         "' (values are numbers, strings, true, false, null, objects and lists)")};
  }
  return {t, absl::StrCat("unexpected ", Shown(text, t), " where a value should be")};
}

// A well-formed token in the wrong place.
SyntaxError Misplaced(absl::string_view text, const ParseFailure& f, size_t t) {
  const std::string got = Shown(text, t);
  if (t < text.size() && (text[t] == '}' || text[t] == ']')) {
    const size_t comma = PreviousNonSpace(text, t);
    if (comma != absl::string_view::npos && text[comma] == ',') {
      return {comma, absl::StrCat("a trailing comma before ", got)};
    }
  }
  // "01" lexes as the number 0 followed by the number 1.
  if (t > 0 && IsDigit(text[t]) && text[t - 1] == '0') {
    return {t - 1 > 0 && text[t - 2] == '-' ? t - 2 : t - 1, "a number may not start with 0"};
  }
  if (f.context == "object key")
    return {t, absl::StrCat("expected a key in double quotes, got ", got)};
  if (f.context == "object separator")
    return {t, absl::StrCat("expected ':' after the key, got ", got)};
  if (f.context == "object") return {t, absl::StrCat("expected ',' or '}', got ", got)};
  if (f.context == "array") return {t, absl::StrCat("expected ',' or ']', got ", got)};
  if (absl::StrContains(f.detail, "expected end of input")) {
    return {t, "unexpected text after the top-level value"};
  }
  return {t, absl::StrCat("unexpected ", got, " where a value should be")};
}

}  // namespace

void SplitNlohmannMessage(const std::string& what, ParseFailure* failure) {
  absl::string_view rest = what;
  if (const size_t colon = rest.find(": "); colon != absl::string_view::npos) {
    rest.remove_prefix(colon + 2);  // past "[json.exception...] parse error at line L, column C"
  }
  constexpr absl::string_view kWhile = "syntax error while parsing ";
  if (absl::ConsumePrefix(&rest, kWhile)) {
    const size_t dash = rest.find(" - ");
    failure->context = std::string(rest.substr(0, dash));
    if (dash != absl::string_view::npos) rest.remove_prefix(dash + 3);
  } else {
    absl::ConsumePrefix(&rest, "syntax error - ");
  }
  failure->detail = std::string(rest);
}

SyntaxError ExplainFailure(absl::string_view text, const ParseFailure& failure,
                           const std::vector<OpenContainer>& open) {
  const size_t t = TokenStart(text, failure);
  if (failure.id == 406) return {t, "a number out of the range of a double"};
  if (absl::StartsWith(failure.detail, "invalid")) return BadToken(text, failure, t);
  if (t >= text.size()) return AtEnd(text, failure, open);
  return Misplaced(text, failure, t);
}

std::string LineColumn(absl::string_view text, size_t at) {
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') ++line, line_start = i + 1;
  }
  return absl::StrCat(line, ":", at - line_start + 1);
}

std::string FormatSyntaxError(absl::string_view text, const std::string& file, size_t at,
                              const std::string& why) {
  return absl::StrCat(file, ":", LineColumn(text, at), ": not valid JSON: ", why);
}

}  // namespace zerotrain::json
