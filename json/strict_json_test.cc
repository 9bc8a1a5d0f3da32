// ParseStrict: values against hand-written texts (exact integers, file order), every error class
// with its line and column, the mistakes people make in a hand-written ds_config.json, and a
// fuzz loop over truncated and mutated documents.
#include "json/strict_json.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "json/json_fields.h"

namespace zerotrain::json {
namespace {

using ::testing::HasSubstr;

Json MustParse(absl::string_view text) {
  absl::StatusOr<Json> v = ParseStrict(text, "test");
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : Json();
}

TEST(StrictJsonTest, ParsesEveryKind) {
  const Json v = MustParse(
      " {\"z\": null, \"t\": true, \"f\": false, \"i\": -42, \"d\": 2.5e-1,\n"
      "  \"s\": \"h\\u00e9\\ud83d\\ude00\\n\\/\", \"a\": [1, [], {}]} ");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.size(), 7u);
  const char* order[] = {"z", "t", "f", "i", "d", "s", "a"};  // file order, not sorted
  size_t i = 0;
  for (const auto& [key, value] : v.items()) EXPECT_EQ(key, order[i++]);
  EXPECT_TRUE(v["z"].is_null());
  EXPECT_EQ(*GetBool(v, "t"), true);
  EXPECT_EQ(*GetBool(v, "f"), false);
  EXPECT_EQ(*GetInt(v, "i"), -42);
  EXPECT_EQ(*GetDouble(v, "d"), 0.25);
  EXPECT_FALSE(v["d"].is_number_integer());
  EXPECT_EQ(*GetString(v, "s"), "h\xC3\xA9\xF0\x9F\x98\x80\n/");
  ASSERT_EQ(v["a"].size(), 3u);
  EXPECT_EQ(v["a"][2], Json::object());
}

TEST(StrictJsonTest, IntegersStayExact) {
  EXPECT_EQ(MustParse("9007199254740993").get<int64_t>(), (int64_t{1} << 53) + 1);
  EXPECT_EQ(MustParse("9223372036854775807").get<int64_t>(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(MustParse("-9223372036854775808").get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(MustParse("-0").get<int64_t>(), 0);
  const Json too_big = MustParse("9223372036854775808");  // only a double can hold it
  EXPECT_FALSE(too_big.is_number_integer());
  EXPECT_EQ(too_big.get<double>(), 9223372036854775808.0);
  EXPECT_FALSE(MustParse("1.0").is_number_integer());
  EXPECT_FALSE(MustParse("1e3").is_number_integer());
  EXPECT_EQ(MustParse("4.9406564584124654e-324").get<double>(),
            std::numeric_limits<double>::denorm_min());
}

struct BadJson {
  std::string text;
  std::string error;  // the whole message after "test:"
};

TEST(StrictJsonTest, EachErrorSaysWhereAndWhat) {
  const std::string kValues = "(values are numbers, strings, true, false, null, objects and lists)";
  const BadJson cases[] = {
      {"", "1:1: not valid JSON: the file is empty"},
      {"{\"a\": ", "1:7: not valid JSON: the input ends where a value should be (truncated?)"},
      {"[1, 2", "1:6: not valid JSON: the input ends inside the list opened at 1:1 (truncated?)"},
      {"{\"a\":1",
       "1:7: not valid JSON: the input ends inside the object opened at 1:1 (truncated?)"},
      {"\"abc", "1:1: not valid JSON: a string that never ends (truncated, or a missing '\"')"},
      {"\"\\", "1:1: not valid JSON: a string that never ends (truncated, or a missing '\"')"},
      {"\"\\u12", "1:1: not valid JSON: a string that never ends (truncated, or a missing '\"')"},
      {"\"\\ud800\\",
       "1:1: not valid JSON: a string that never ends (truncated, or a missing '\"')"},
      {"tru", "1:1: not valid JSON: unexpected word 'tru' " + kValues},
      {"1.", "1:3: not valid JSON: the input ends inside a number (truncated?)"},
      {"-", "1:2: not valid JSON: the input ends inside a number (truncated?)"},
      {"1e+", "1:4: not valid JSON: the input ends inside a number (truncated?)"},
      {"\"a\\x\"",
       "1:3: not valid JSON: a bad escape in a string (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)"},
      {"\"\\u12G4\"", "1:2: not valid JSON: a \\u escape needs 4 hex digits"},
      {"\"\\ud800\"", "1:2: not valid JSON: an unpaired UTF-16 surrogate in a \\u escape"},
      {"\"\\ud800\\u0041\"", "1:8: not valid JSON: an unpaired UTF-16 surrogate in a \\u escape"},
      {"\"\\ud800x\"", "1:2: not valid JSON: an unpaired UTF-16 surrogate in a \\u escape"},
      {"\"\\udc00\"", "1:2: not valid JSON: an unpaired UTF-16 surrogate in a \\u escape"},
      {"\"a\nb\"",
       "1:3: not valid JSON: a control character (a line break?) inside a string; write \\n"},
      {"\"\xff\"", "1:2: not valid JSON: invalid UTF-8 in a string"},
      {"\"\xc0\xaf\"", "1:2: not valid JSON: invalid UTF-8 in a string"},          // overlong '/'
      {"\"\xed\xa0\x80\"", "1:3: not valid JSON: invalid UTF-8 in a string"},      // a surrogate
      {"\"\xf4\x90\x80\x80\"", "1:3: not valid JSON: invalid UTF-8 in a string"},  // > U+10FFFF
      {"1 2", "1:3: not valid JSON: unexpected text after the top-level value"},
      {"{} x", "1:4: not valid JSON: unexpected word 'x' " + kValues},
      {"{\"a\":1,\"a\":2}", "1:8: not valid JSON: duplicate key \"a\" (first at 1:2)"},
      {"01", "1:1: not valid JSON: a number may not start with 0"},
      {"[-01]", "1:2: not valid JSON: a number may not start with 0"},
      {"1.x", "1:3: not valid JSON: a digit should follow '.'"},
      {"-a", "1:2: not valid JSON: a digit should follow '-'"},
      {"1eq", "1:3: not valid JSON: a digit should follow the exponent"},
      {"trux", "1:1: not valid JSON: unexpected word 'trux' " + kValues},
      {"[1,]", "1:3: not valid JSON: a trailing comma before ']'"},
      {"[1 2]", "1:4: not valid JSON: expected ',' or ']', got '2'"},
      {"{\"a\" 1}", "1:6: not valid JSON: expected ':' after the key, got '1'"},
      {"{\"a\":1 \"b\":2}", "1:8: not valid JSON: expected ',' or '}', got '\"'"},
      {"{1:2}", "1:2: not valid JSON: expected a key in double quotes, got '1'"},
      {"[}", "1:2: not valid JSON: unexpected '}' where a value should be"},
      {"[\x01]", "1:2: not valid JSON: unexpected byte 0x01 where a value should be"},
      {"NaN", "1:1: not valid JSON: NaN is not JSON (write a number, or null)"},
      {"\xef\xbb\xbf{}", "1:1: not valid JSON: a byte order mark (JSON text is UTF-8 without one)"},
      {"1e999", "1:1: not valid JSON: a number out of the range of a double"},
      {"[\n  1,\n  2 3]", "3:5: not valid JSON: expected ',' or ']', got '3'"},
      {"[true false]", "1:7: not valid JSON: expected ',' or ']', got 'f'"},
      {"{\"on\"\n null}", "2:2: not valid JSON: expected ':' after the key, got 'n'"},
      {"{\"a\": tru}", "1:7: not valid JSON: unexpected word 'tru' " + kValues},
      {"[1, nul,2]", "1:5: not valid JSON: unexpected word 'nul' " + kValues},
      {std::string("{\"a\":1}\0x", 9),
       "1:8: not valid JSON: a NUL byte (JSON text has none; inside a string, write \\u0000)"},
      {std::string("[1,\0 2]", 7),
       "1:4: not valid JSON: a NUL byte (JSON text has none; inside a string, write \\u0000)"},
      {std::string(129, '[') + std::string(129, ']'),
       "1:129: not valid JSON: nested deeper than 128 levels"},
  };
  for (const BadJson& c : cases) {
    const absl::StatusOr<Json> v = ParseStrict(c.text, "test");
    ASSERT_FALSE(v.ok()) << c.text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(v.status().message(), "test:" + c.error) << c.text;
  }
  EXPECT_TRUE(ParseStrict(std::string(128, '[') + std::string(128, ']'), "test").ok());
  EXPECT_FALSE(ParseStrict(std::string(1000000, '['), "test").ok());  // refused, not recursed
}

std::string Error(const std::string& json) {
  const absl::StatusOr<Json> v = ParseStrict(json, "ds.json");
  EXPECT_FALSE(v.ok()) << json;
  if (v.ok()) return "";
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  EXPECT_EQ(std::string(v.status().message()).find('\n'), std::string::npos) << v.status();
  return std::string(v.status().message());
}

// What Python's json or protobuf's reader would let through in a hand-written ds_config.json.
TEST(StrictJsonTest, ValidConfigsPass) {
  for (const char* json : {
           R"({})",
           R"({"a": 1, "b": [1, -2.5e-3, 0, true, false, null, "x\"\u00e9\n"], "c": {"d": {}}})",
           " \n\t{\"zero_optimization\": {\"stage\": 3}}\r\n", R"([])",
           R"({"a": "b", "A": "b"})",  // keys differ by case
       }) {
    EXPECT_TRUE(ParseStrict(json, "ds.json").ok()) << json;
  }
}

TEST(StrictJsonTest, TrailingCommasAreRefusedWhereTheCommaIs) {
  EXPECT_EQ(Error("{\n  \"a\": 1,\n}"), "ds.json:2:9: not valid JSON: a trailing comma before '}'");
  EXPECT_EQ(Error(R"({"a": [1, 2, ]})"),
            "ds.json:1:12: not valid JSON: a trailing comma before ']'");
}

TEST(StrictJsonTest, CommentsAreRefused) {
  EXPECT_EQ(Error("{\n  // stage 2\n  \"a\": 1}"),
            "ds.json:2:3: not valid JSON: comments are not JSON");
  EXPECT_THAT(Error(R"({"a": 1 /* x */})"), HasSubstr("ds.json:1:9: "));
}

TEST(StrictJsonTest, NanAndInfinityAreRefused) {
  EXPECT_THAT(Error(R"({"lr": NaN})"), HasSubstr("ds.json:1:8: not valid JSON: NaN is not JSON"));
  EXPECT_THAT(Error(R"({"lr": Infinity})"), HasSubstr("1:8: not valid JSON: Infinity is not JSON"));
  EXPECT_THAT(Error(R"({"lr": -Infinity})"), HasSubstr("1:8: not valid JSON: -Infinity is not"));
}

TEST(StrictJsonTest, DuplicateKeysNameBothPlaces) {
  EXPECT_EQ(Error("{\"zero_optimization\": {\"stage\": 2,\n \"stage\": 3}}"),
            "ds.json:2:2: not valid JSON: duplicate key \"stage\" (first at 1:24)");
  // The same key written with an escape is the same key.
  EXPECT_THAT(Error(R"({"a": 1, "\u0061": 2})"), HasSubstr("1:10: not valid JSON: duplicate key"));
  EXPECT_THAT(Error(R"({"\"": 1, "\"": 2})"), HasSubstr("1:11: not valid JSON: duplicate key"));
  // The same key in two different objects is fine.
  EXPECT_TRUE(ParseStrict(R"({"a": {"x": 1}, "b": {"x": 1}})", "ds.json").ok());
}

TEST(StrictJsonTest, TruncatedInputSaysWhereItEnds) {
  EXPECT_EQ(Error("{\"a\": {\"b\": 1}"),
            "ds.json:1:15: not valid JSON: the input ends inside the object opened at 1:1 "
            "(truncated?)");
  EXPECT_THAT(Error("{\"a\": [1, 2"), HasSubstr("ends inside the list opened at 1:7"));
  EXPECT_THAT(Error("{\"a\": "), HasSubstr("1:7: not valid JSON: the input ends where a value"));
  EXPECT_THAT(Error("{\"a\": \"tru"), HasSubstr("1:7: not valid JSON: a string that never ends"));
  EXPECT_THAT(Error(""), HasSubstr("ds.json:1:1: not valid JSON: the file is empty"));
}

TEST(StrictJsonTest, OtherMistakesAreNamed) {
  EXPECT_THAT(Error("{'a': 1}"), HasSubstr("1:2: not valid JSON: keys take double quotes"));
  EXPECT_THAT(Error(R"({"a": 'b'})"), HasSubstr("strings take double quotes"));
  EXPECT_THAT(Error(R"({"a": 01})"), HasSubstr("may not start with 0"));
  EXPECT_THAT(Error(R"({"a": True})"), HasSubstr("unexpected word 'True'"));
  EXPECT_THAT(Error(R"({"a" 1})"), HasSubstr("1:6: not valid JSON: expected ':' after the key"));
  EXPECT_THAT(Error(R"({"a": 1 "b": 2})"), HasSubstr("1:9: not valid JSON: expected ',' or '}'"));
  EXPECT_THAT(Error("{\"a\": \"x\ny\"}"), HasSubstr("a control character"));
  EXPECT_THAT(Error(R"({"a": "\q"})"), HasSubstr("1:8: not valid JSON: a bad escape"));
  EXPECT_THAT(Error(R"({} {})"), HasSubstr("1:4: not valid JSON: unexpected text after"));
  EXPECT_THAT(Error(std::string(300, '[') + std::string(300, ']')), HasSubstr("nested deeper"));
}

// Whatever the bytes, ParseStrict returns; what it accepts writes back to an equal value.
void ParseAndCheck(const std::string& text) {
  const absl::StatusOr<Json> v = ParseStrict(text, "fuzz");
  if (!v.ok()) {
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("fuzz:")) << text;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(": not valid JSON: ")) << text;
    return;
  }
  for (const int indent : {0, 2}) {
    const absl::StatusOr<Json> back = ParseStrict(Write(*v, indent), "rewritten");
    ASSERT_TRUE(back.ok()) << back.status() << " for " << text;
    EXPECT_EQ(*back, *v) << text;
  }
}

TEST(StrictJsonTest, FuzzedDocumentsNeverCrash) {
  const std::string docs[] = {
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
      "\"__metadata__\":{\"format\":\"pt\"}}",
      "{\"metadata\": {\"total_size\": 123}, \"weight_map\": {\"a.b\": \"model-00001-of-00002\"}}",
      "[1, -2.5e+3, true, false, null, \"\\ud83d\\ude00\\u00e9\\t\", {\"k\": [[]]}, 0.1]",
  };
  for (const std::string& doc : docs) {
    ParseAndCheck(doc);
    for (size_t n = 0; n < doc.size(); ++n) ParseAndCheck(doc.substr(0, n));
  }
  std::mt19937 rng(20240611);
  const std::string interesting = "{}[]\",:\\u0123456789eE.-+ tfnl\x80\xff\xc3\xed";
  for (int iter = 0; iter < 5000; ++iter) {
    std::string doc = docs[iter % 3];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % doc.size();
      if (rng() % 2 == 0) {
        doc[at] = static_cast<char>(rng() % 256);
      } else {
        doc[at] = interesting[rng() % interesting.size()];
      }
    }
    ParseAndCheck(doc);
  }
}

}  // namespace
}  // namespace zerotrain::json
