// Strict JSON syntax check (see json_syntax.h): a recursive descent over the text that keeps
// nothing but each object's keys, to find duplicates.
#include "trainer/config/json_syntax.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerotrain::trainer {
namespace {

// Deeper nesting is no config; the limit keeps the recursion's stack bounded.
constexpr int kMaxDepth = 200;

class JsonSyntax {
 public:
  JsonSyntax(absl::string_view text, const std::string& file) : text_(text), file_(file) {}

  absl::Status Check() {
    SkipSpace();
    if (!error_.ok()) return error_;
    if (AtEnd()) return Failed(pos_, "the file is empty"), error_;
    if (!Value(0)) return error_;
    SkipSpace();
    if (!error_.ok()) return error_;
    if (!AtEnd()) return Failed(pos_, "unexpected text after the top-level value"), error_;
    return absl::OkStatus();
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  // Records the first error (the one reported); false, for the parsing functions to return.
  bool Failed(size_t at, const std::string& why) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(
          absl::StrCat(file_, ":", Position(at), ": not valid JSON: ", why));
    }
    return false;
  }

  // "line:column" of byte `at`, both from 1.
  std::string Position(size_t at) const {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line, line_start = i + 1;
    }
    return absl::StrCat(line, ":", at - line_start + 1);
  }

  std::string Shown(size_t at) const {
    const char c = text_[at];
    return absl::ascii_isprint(static_cast<unsigned char>(c))
               ? absl::StrCat("'", std::string(1, c), "'")
               : absl::StrFormat("byte 0x%02x", c & 0xff);
  }

  void SkipSpace() {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/') {
        Failed(pos_, "comments are not JSON");
        return;
      } else {
        return;
      }
    }
  }

  bool Value(int depth) {
    if (depth > kMaxDepth) return Failed(pos_, absl::StrCat("nested deeper than ", kMaxDepth));
    if (AtEnd()) return Failed(pos_, "the input ends where a value should be (truncated?)");
    const char c = Peek();
    if (c == '{') return Object(depth + 1);
    if (c == '[') return Array(depth + 1);
    if (c == '"') return String(nullptr);
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c))) return Number();
    if (c == '\'') return Failed(pos_, "strings take double quotes");
    if (absl::ascii_isalpha(static_cast<unsigned char>(c))) return Word();
    return Failed(pos_, absl::StrCat("unexpected ", Shown(pos_), " where a value should be"));
  }

  bool Word() {
    const size_t start = pos_;
    while (!AtEnd() && absl::ascii_isalnum(static_cast<unsigned char>(Peek()))) ++pos_;
    const absl::string_view word = text_.substr(start, pos_ - start);
    if (word == "true" || word == "false" || word == "null") return true;
    if (word == "NaN" || word == "Infinity") {
      return Failed(start, absl::StrCat(word, " is not JSON (write a number, or null)"));
    }
    return Failed(start, absl::StrCat("unexpected word '", word, "' (values are numbers, strings, ",
                                      "true, false, null, objects and lists)"));
  }

  bool Digits() {
    const size_t start = pos_;
    while (!AtEnd() && absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) ++pos_;
    return pos_ > start;
  }

  bool Number() {
    const size_t start = pos_;
    if (Peek() == '-') ++pos_;
    if (Peek() == 'I') return Failed(start, "-Infinity is not JSON (write a number, or null)");
    if (Peek() == '0' && pos_ + 1 < text_.size() &&
        absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_ + 1]))) {
      return Failed(start, "a number may not start with 0");
    }
    if (!Digits()) return Failed(pos_, "a digit should follow '-'");
    if (Peek() == '.') {
      ++pos_;
      if (!Digits()) return Failed(pos_, "a digit should follow '.'");
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!Digits()) return Failed(pos_, "a digit should follow the exponent");
    }
    return true;
  }

  // A string at pos_; its contents, escapes decoded, into `decoded` when given.
  bool String(std::string* decoded) {
    const size_t start = pos_++;
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Failed(pos_, "a control character (a line break?) inside a string; write \\n");
      }
      if (c != '\\') {
        if (decoded) decoded->push_back(c);
        ++pos_;
        continue;
      }
      const size_t escape = pos_++;
      const char e = Peek();
      static const std::map<char, char> kSimple = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},
                                                   {'b', '\b'}, {'f', '\f'},  {'n', '\n'},
                                                   {'r', '\r'}, {'t', '\t'}};
      if (const auto it = kSimple.find(e); it != kSimple.end()) {
        if (decoded) decoded->push_back(it->second);
        ++pos_;
      } else if (e == 'u' && pos_ + 4 < text_.size() &&
                 std::all_of(text_.begin() + pos_ + 1, text_.begin() + pos_ + 5, [](char h) {
                   return absl::ascii_isxdigit(static_cast<unsigned char>(h));
                 })) {
        if (decoded) {
          // ASCII as itself, so "\u0061" and "a" are one key; other code units kept escaped.
          const int unit = std::stoi(std::string(text_.substr(pos_ + 1, 4)), nullptr, 16);
          if (unit < 0x80) {
            decoded->push_back(static_cast<char>(unit));
          } else {
            absl::StrAppendFormat(decoded, "\\u%04x", unit);
          }
        }
        pos_ += 5;
      } else if (!AtEnd()) {
        return Failed(escape,
                      "a bad escape in a string (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
    return Failed(start, "a string that never ends (truncated, or a missing '\"')");
  }

  bool Object(int depth) {
    const size_t open = pos_++;
    std::map<std::string, size_t> keys;  // key -> where it was first seen
    SkipSpace();
    if (Peek() == '}') return ++pos_, true;
    while (error_.ok()) {
      if (AtEnd()) break;
      if (Peek() != '"') {
        return Failed(pos_, Peek() == '\'' ? "keys take double quotes"
                                           : absl::StrCat("expected a key in double quotes, got ",
                                                          Shown(pos_)));
      }
      const size_t key_at = pos_;
      std::string key;
      if (!String(&key)) return false;
      if (const auto [it, fresh] = keys.emplace(key, key_at); !fresh) {
        return Failed(key_at, absl::StrCat("duplicate key \"", key, "\" (first at ",
                                           Position(it->second), ")"));
      }
      SkipSpace();
      if (AtEnd()) break;
      if (Peek() != ':')
        return Failed(pos_, absl::StrCat("expected ':' after the key, got ", Shown(pos_)));
      ++pos_;
      SkipSpace();
      if (!error_.ok() || !Value(depth)) return false;
      SkipSpace();
      if (AtEnd()) break;
      if (Peek() == '}') return ++pos_, true;
      if (Peek() != ',')
        return Failed(pos_, absl::StrCat("expected ',' or '}', got ", Shown(pos_)));
      const size_t comma = pos_++;
      SkipSpace();
      if (Peek() == '}') return Failed(comma, "a trailing comma before '}'");
    }
    if (!error_.ok()) return false;
    return Failed(pos_, absl::StrCat("the input ends inside the object opened at ", Position(open),
                                     " (truncated?)"));
  }

  bool Array(int depth) {
    const size_t open = pos_++;
    SkipSpace();
    if (Peek() == ']') return ++pos_, true;
    while (error_.ok() && !AtEnd()) {
      if (!Value(depth)) return false;
      SkipSpace();
      if (AtEnd()) break;
      if (Peek() == ']') return ++pos_, true;
      if (Peek() != ',')
        return Failed(pos_, absl::StrCat("expected ',' or ']', got ", Shown(pos_)));
      const size_t comma = pos_++;
      SkipSpace();
      if (Peek() == ']') return Failed(comma, "a trailing comma before ']'");
    }
    if (!error_.ok()) return false;
    return Failed(pos_, absl::StrCat("the input ends inside the list opened at ", Position(open),
                                     " (truncated?)"));
  }

  absl::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  absl::Status error_;
};

}  // namespace

absl::Status CheckJsonSyntax(absl::string_view text, const std::string& file) {
  return JsonSyntax(text, file).Check();
}

}  // namespace zerotrain::trainer
