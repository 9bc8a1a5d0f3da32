// ParseJson (json_value.h): recursive descent over RFC 8259's grammar and nothing more (no
// comments, trailing commas, NaN, leading zeros or invalid UTF-8, which lenient parsers let through
// and serde_json, the safetensors library's parser, does not), its recursion bounded so that
// hostile input cannot exhaust the stack.
#include <cstdint>
#include <system_error>
#include <unordered_set>

#include "absl/strings/charconv.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/json_utf8.h"
#include "checkpoint/json_value.h"

namespace zerotrain::checkpoint {
namespace {

using json_utf8::AppendUtf8;
using json_utf8::Utf8SequenceLength;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(absl::string_view text, const std::string& what) : text_(text), what_(what) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue value;
    SkipWhitespace();
    absl::Status s = ParseValue(0, &value);
    if (!s.ok()) return s;
    SkipWhitespace();
    if (pos_ != text_.size()) return Error(pos_, "unexpected data after the JSON value");
    return value;
  }

 private:
  absl::Status Error(size_t at, absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": byte ", at, ": ", problem));
  }
  absl::Status EndOfInput() const { return Error(text_.size(), "unexpected end of input"); }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  // Consumes `c` after optional whitespace, or fails saying what was expected.
  absl::Status Expect(char c, absl::string_view expected) {
    SkipWhitespace();
    if (AtEnd()) return EndOfInput();
    if (Peek() != c) return Error(pos_, absl::StrCat("expected ", expected));
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status ParseValue(int depth, JsonValue* out) {
    if (AtEnd()) return EndOfInput();
    switch (Peek()) {
      case '{':
        return ParseObject(depth + 1, out);
      case '[':
        return ParseArray(depth + 1, out);
      case '"': {
        std::string s;
        absl::Status status = ParseString(&s);
        *out = JsonValue::String(std::move(s));
        return status;
      }
      case 't':
        return ParseLiteral("true", JsonValue::Bool(true), out);
      case 'f':
        return ParseLiteral("false", JsonValue::Bool(false), out);
      case 'n':
        return ParseLiteral("null", JsonValue(), out);
      default:
        if (Peek() == '-' || IsDigit(Peek())) return ParseNumber(out);
        return Error(pos_, "expected a JSON value");
    }
  }

  absl::Status ParseLiteral(absl::string_view word, JsonValue value, JsonValue* out) {
    if (text_.substr(pos_, word.size()) != word) {
      if (text_.size() - pos_ < word.size() &&
          word.substr(0, text_.size() - pos_) == text_.substr(pos_)) {
        return EndOfInput();
      }
      return Error(pos_, absl::StrCat("expected ", word));
    }
    pos_ += word.size();
    *out = std::move(value);
    return absl::OkStatus();
  }

  absl::Status CheckDepth(int depth) const {
    if (depth <= kMaxJsonDepth) return absl::OkStatus();
    return Error(pos_, absl::StrCat("nesting deeper than ", kMaxJsonDepth, " levels"));
  }

  absl::Status ParseArray(int depth, JsonValue* out) {
    absl::Status s = CheckDepth(depth);
    if (!s.ok()) return s;
    ++pos_;  // '['
    *out = JsonValue::MakeArray();
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') return ++pos_, absl::OkStatus();
    while (true) {
      JsonValue element;
      SkipWhitespace();
      if (s = ParseValue(depth, &element); !s.ok()) return s;
      out->Append(std::move(element));
      SkipWhitespace();
      if (AtEnd()) return EndOfInput();
      if (Peek() == ']') return ++pos_, absl::OkStatus();
      if (s = Expect(',', "',' or ']' in an array"); !s.ok()) return s;
    }
  }

  absl::Status ParseObject(int depth, JsonValue* out) {
    absl::Status s = CheckDepth(depth);
    if (!s.ok()) return s;
    ++pos_;  // '{'
    *out = JsonValue::MakeObject();
    std::unordered_set<std::string> keys;  // a header may hold thousands of tensors
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') return ++pos_, absl::OkStatus();
    while (true) {
      SkipWhitespace();
      if (AtEnd()) return EndOfInput();
      if (Peek() != '"') return Error(pos_, "expected a string key in an object");
      const size_t key_at = pos_;
      std::string key;
      if (s = ParseString(&key); !s.ok()) return s;
      if (s = Expect(':', "':' after an object key"); !s.ok()) return s;
      SkipWhitespace();
      JsonValue value;
      if (s = ParseValue(depth, &value); !s.ok()) return s;
      if (!keys.insert(key).second) {
        return Error(key_at, absl::StrCat("duplicate key \"", key, "\""));
      }
      out->Add(std::move(key), std::move(value));
      SkipWhitespace();
      if (AtEnd()) return EndOfInput();
      if (Peek() == '}') return ++pos_, absl::OkStatus();
      if (s = Expect(',', "',' or '}' in an object"); !s.ok()) return s;
    }
  }

  absl::Status ParseHex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return EndOfInput();
    *out = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char c = Peek();
      const int digit = IsDigit(c)               ? c - '0'
                        : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                        : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                 : -1;
      if (digit < 0) return Error(pos_, "bad hex digit in a \\u escape");
      *out = *out * 16 + static_cast<uint32_t>(digit);
    }
    return absl::OkStatus();
  }

  // After the backslash of a \u escape: one code point, from a surrogate pair when it takes two.
  absl::Status ParseUnicodeEscape(size_t escape_at, std::string* out) {
    uint32_t cp = 0;
    absl::Status s = ParseHex4(&cp);
    if (!s.ok()) return s;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return Error(escape_at, "unpaired low surrogate");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      const auto unpaired = [&] { return Error(escape_at, "unpaired high surrogate"); };
      if (AtEnd()) return EndOfInput();
      if (Peek() != '\\') return unpaired();
      if (++pos_, AtEnd()) return EndOfInput();
      if (Peek() != 'u') return unpaired();
      ++pos_;
      uint32_t low = 0;
      if (s = ParseHex4(&low); !s.ok()) return s;
      if (low < 0xDC00 || low > 0xDFFF) return unpaired();
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(cp, out);
    return absl::OkStatus();
  }

  absl::Status ParseEscape(std::string* out) {
    const size_t escape_at = pos_;
    ++pos_;  // the backslash
    if (AtEnd()) return EndOfInput();
    const char c = text_[pos_++];
    if (c == 'u') return ParseUnicodeEscape(escape_at, out);
    // The escapes of one character each, and those characters.
    constexpr absl::string_view kEscaped = "\"\\/bfnrt";
    constexpr absl::string_view kMeaning = "\"\\/\b\f\n\r\t";
    const size_t which = kEscaped.find(c);
    if (which == absl::string_view::npos) {
      return Error(escape_at, "bad escape sequence in a string");
    }
    out->push_back(kMeaning[which]);
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // the opening quote
    while (true) {
      if (AtEnd()) return EndOfInput();
      const uint8_t c = static_cast<uint8_t>(Peek());
      if (c == '"') return ++pos_, absl::OkStatus();
      if (c == '\\') {
        absl::Status s = ParseEscape(out);
        if (!s.ok()) return s;
      } else if (c < 0x20) {
        return Error(pos_, "unescaped control character in a string");
      } else if (c < 0x80) {
        out->push_back(static_cast<char>(c));
        ++pos_;
      } else {
        const size_t n = Utf8SequenceLength(text_, pos_);
        if (n == 0) return Error(pos_, "invalid UTF-8 in a string");
        out->append(text_.data() + pos_, n);
        pos_ += n;
      }
    }
  }

  absl::Status ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    const auto digits = [&]() {
      const size_t from = pos_;
      while (!AtEnd() && IsDigit(Peek())) ++pos_;
      return pos_ - from;
    };
    if (Peek() == '-') ++pos_;
    if (AtEnd()) return EndOfInput();
    if (!IsDigit(Peek())) return Error(pos_, "expected a digit");
    if (Peek() == '0' && pos_ + 1 < text_.size() && IsDigit(text_[pos_ + 1])) {
      return Error(pos_, "leading zero in a number");
    }
    digits();
    bool integer = true;
    if (!AtEnd() && Peek() == '.') {
      ++pos_;
      integer = false;
      if (digits() == 0) return AtEnd() ? EndOfInput() : Error(pos_, "expected a digit");
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      ++pos_;
      integer = false;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (digits() == 0) return AtEnd() ? EndOfInput() : Error(pos_, "expected a digit");
    }
    const absl::string_view literal = text_.substr(start, pos_ - start);
    int64_t i = 0;
    if (integer && absl::SimpleAtoi(literal, &i)) {
      *out = JsonValue::Int(i);
      return absl::OkStatus();
    }
    double d = 0;  // also an integer beyond int64, which only a double can approximate
    const absl::from_chars_result r =
        absl::from_chars(literal.data(), literal.data() + literal.size(), d);
    if (r.ec != std::errc() || r.ptr != literal.data() + literal.size()) {
      return Error(start, "number out of the range of a double");
    }
    *out = JsonValue::Double(d);
    return absl::OkStatus();
  }

  absl::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(absl::string_view text, const std::string& what) {
  return Parser(text, what).ParseDocument();
}

}  // namespace zerotrain::checkpoint
