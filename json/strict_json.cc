// ParseStrict (see strict_json.h): nlohmann's SAX parser drives a builder of our own, which is
// where duplicate keys, depth and positions are handled; nlohmann's own DOM builder keeps the
// last of two equal keys and records no positions.
#include "json/strict_json.h"

#include <cstdint>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "json/syntax_error.h"

namespace zerotrain::json {
namespace {

// An input iterator over the text that counts the bytes nlohmann's lexer pulls: SAX events carry
// no position, and a duplicate key or an unclosed bracket is reported with its own. At an object
// or array start and after a key, the count is exactly the end of that token (only numbers make
// the lexer read ahead).
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* p, size_t* read) : p_(p), read_(read) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    ++p_;
    ++*read_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const CountingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  size_t* read_;
};

// nlohmann's SAX interface, building a Json.
class Builder {
 public:
  Builder(absl::string_view text, const std::string& file, const size_t* read)
      : text_(text), file_(file), read_(read) {}

  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool b) { return Put(Json(b)); }
  bool number_integer(int64_t i) { return Put(Json(i)); }
  bool number_unsigned(uint64_t u) {
    // Every integer is an int64; one beyond its range only a double can hold.
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Put(Json(static_cast<double>(u)));
    }
    return Put(Json(static_cast<int64_t>(u)));
  }
  bool number_float(double d, const std::string& /*text*/) { return Put(Json(d)); }
  bool string(std::string& s) { return Put(Json(std::move(s))); }
  bool binary(Json::binary_t& /*bytes*/) { return false; }  // JSON text has none
  bool start_object(size_t /*unknown*/) { return Open(Json::object()); }
  bool start_array(size_t /*unknown*/) { return Open(Json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(std::string& key);
  bool parse_error(size_t position, const std::string& last_token, const Json::exception& ex);

  absl::Status error() const { return error_; }
  Json TakeRoot() { return std::move(root_); }

 private:
  struct Level {
    Json* value;
    size_t start;
    std::unordered_map<std::string, size_t> keys;  // an object's keys -> where each starts
    std::string pending_key;
  };

  bool Fail(size_t at, const std::string& why) {
    error_ = absl::InvalidArgumentError(FormatSyntaxError(text_, file_, at, why));
    return false;
  }
  // Places `value` where the parser is (the root, the next element, the pending key's value).
  Json* Place(Json value);
  bool Put(Json value) {
    Place(std::move(value));
    return true;
  }
  bool Open(Json container);
  bool Close() {
    levels_.pop_back();
    return true;
  }

  absl::string_view text_;
  const std::string& file_;
  const size_t* read_;
  Json root_;
  std::vector<Level> levels_;
  absl::Status error_;
};

Json* Builder::Place(Json value) {
  if (levels_.empty()) {
    root_ = std::move(value);
    return &root_;
  }
  Level& top = levels_.back();
  if (top.value->is_array()) {
    top.value->push_back(std::move(value));
    return &top.value->back();
  }
  // Keys were checked in key(); ordered_map's own insert would search them again.
  auto& members = top.value->get_ref<Json::object_t&>();
  members.emplace_back(std::move(top.pending_key), std::move(value));
  return &members.back().second;
}

bool Builder::Open(Json container) {
  const size_t start = *read_ - 1;  // the '{' or '[' just read
  if (levels_.size() >= static_cast<size_t>(kMaxDepth)) {
    return Fail(start, absl::StrCat("nested deeper than ", kMaxDepth, " levels"));
  }
  levels_.push_back(Level{Place(std::move(container)), start, {}, {}});
  return true;
}

bool Builder::key(std::string& key) {
  // The key's closing quote was the last byte read; its opening quote is the nearest '"'
  // before it that no backslash escapes.
  size_t start = *read_ - 1;
  while (start > 0) {
    --start;
    if (text_[start] != '"') continue;
    size_t backslashes = 0;
    while (start > backslashes && text_[start - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) break;
  }
  Level& top = levels_.back();
  const auto [it, fresh] = top.keys.emplace(key, start);
  if (!fresh) {
    return Fail(start, absl::StrCat("duplicate key \"", key, "\" (first at ",
                                    LineColumn(text_, it->second), ")"));
  }
  top.pending_key = std::move(key);
  return true;
}

bool Builder::parse_error(size_t position, const std::string& last_token,
                          const Json::exception& ex) {
  ParseFailure f;
  f.position = position;
  f.token_size = last_token.size();
  f.id = ex.id;
  SplitNlohmannMessage(ex.what(), &f);
  std::vector<OpenContainer> open;
  for (const Level& level : levels_) open.push_back({level.start, level.value->is_object()});
  const SyntaxError e = ExplainFailure(text_, f, open);
  return Fail(e.at, e.why);
}

}  // namespace

absl::StatusOr<Json> ParseStrict(absl::string_view text, const std::string& file) {
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) {
    return absl::InvalidArgumentError(
        FormatSyntaxError(text, file, 0, "a byte order mark (JSON text is UTF-8 without one)"));
  }
  // nlohmann's lexer takes a NUL byte for the end of the input and would accept what follows.
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(FormatSyntaxError(
        text, file, nul, "a NUL byte (JSON text has none; inside a string, write \\u0000)"));
  }
  size_t read = 0;
  Builder builder(text, file, &read);
  const CountingIterator begin(text.data(), &read);
  const CountingIterator end(text.data() + text.size(), &read);
  if (!Json::sax_parse(begin, end, &builder)) return builder.error();
  return builder.TakeRoot();
}

}  // namespace zerotrain::json
