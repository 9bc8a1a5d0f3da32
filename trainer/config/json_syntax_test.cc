// CheckJsonSyntax: valid JSON passes; each kind of non-JSON (what Python's json or protobuf's
// reader would let through, and truncation) is refused with its line and column.
#include "trainer/config/json_syntax.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace zerotrain::trainer {
namespace {

using ::testing::HasSubstr;

std::string Error(const std::string& json) {
  const absl::Status s = CheckJsonSyntax(json, "ds.json");
  EXPECT_FALSE(s.ok()) << json;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos) << s;
  return std::string(s.message());
}

TEST(JsonSyntax, ValidJsonPasses) {
  for (const char* json : {
           R"({})",
           R"({"a": 1, "b": [1, -2.5e-3, 0, true, false, null, "x\"\u00e9\n"], "c": {"d": {}}})",
           " \n\t{\"zero_optimization\": {\"stage\": 3}}\r\n", R"([])",
           R"({"a": "b", "A": "b"})",  // keys differ by case
       }) {
    EXPECT_TRUE(CheckJsonSyntax(json, "ds.json").ok()) << json;
  }
}

TEST(JsonSyntax, TrailingCommasAreRefusedWhereTheCommaIs) {
  EXPECT_EQ(Error("{\n  \"a\": 1,\n}"), "ds.json:2:9: not valid JSON: a trailing comma before '}'");
  EXPECT_EQ(Error(R"({"a": [1, 2, ]})"),
            "ds.json:1:12: not valid JSON: a trailing comma before ']'");
}

TEST(JsonSyntax, CommentsAreRefused) {
  EXPECT_EQ(Error("{\n  // stage 2\n  \"a\": 1}"),
            "ds.json:2:3: not valid JSON: comments are not JSON");
  EXPECT_THAT(Error(R"({"a": 1 /* x */})"), HasSubstr("ds.json:1:9: "));
}

TEST(JsonSyntax, NanAndInfinityAreRefused) {
  EXPECT_THAT(Error(R"({"lr": NaN})"), HasSubstr("ds.json:1:8: not valid JSON: NaN is not JSON"));
  EXPECT_THAT(Error(R"({"lr": Infinity})"), HasSubstr("1:8: not valid JSON: Infinity is not JSON"));
  EXPECT_THAT(Error(R"({"lr": -Infinity})"), HasSubstr("1:8: not valid JSON: -Infinity is not"));
}

TEST(JsonSyntax, DuplicateKeysNameBothPlaces) {
  EXPECT_EQ(Error("{\"zero_optimization\": {\"stage\": 2,\n \"stage\": 3}}"),
            "ds.json:2:2: not valid JSON: duplicate key \"stage\" (first at 1:24)");
  // The same key written with an escape is the same key.
  EXPECT_THAT(Error(R"({"a": 1, "\u0061": 2})"), HasSubstr("duplicate key"));
  // The same key in two different objects is fine.
  EXPECT_TRUE(CheckJsonSyntax(R"({"a": {"x": 1}, "b": {"x": 1}})", "ds.json").ok());
}

TEST(JsonSyntax, TruncatedInputSaysWhereItEnds) {
  EXPECT_EQ(Error("{\"a\": {\"b\": 1}"),
            "ds.json:1:15: not valid JSON: the input ends inside the object opened at 1:1 "
            "(truncated?)");
  EXPECT_THAT(Error("{\"a\": [1, 2"), HasSubstr("ends inside the list opened at 1:7"));
  EXPECT_THAT(Error("{\"a\": "), HasSubstr("1:7: not valid JSON: the input ends where a value"));
  EXPECT_THAT(Error("{\"a\": \"tru"), HasSubstr("1:7: not valid JSON: a string that never ends"));
  EXPECT_THAT(Error(""), HasSubstr("ds.json:1:1: not valid JSON: the file is empty"));
}

TEST(JsonSyntax, OtherMistakesAreNamed) {
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

}  // namespace
}  // namespace zerotrain::trainer
