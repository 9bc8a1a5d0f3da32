// ParseJson, WriteJson and the field accessors: values against hand-written JSON texts, writer
// output against the bytes serde_json and Python's json.dumps produce, every parse error class
// with its byte offset, and a fuzz loop over truncated and mutated documents.
#include "checkpoint/json_value.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zerotrain::checkpoint {
namespace {

using ::testing::HasSubstr;

JsonValue MustParse(absl::string_view text) {
  absl::StatusOr<JsonValue> v = ParseJson(text, "test");
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : JsonValue();
}

TEST(JsonValueTest, ParsesEveryKind) {
  const JsonValue v = MustParse(
      " {\"z\": null, \"t\": true, \"f\": false, \"i\": -42, \"d\": 2.5e-1,\n"
      "  \"s\": \"h\\u00e9\\ud83d\\ude00\\n\\/\", \"a\": [1, [], {}]} ");
  ASSERT_EQ(v.kind(), JsonValue::Kind::kObject);
  const JsonValue::Object& members = v.object();
  ASSERT_EQ(members.size(), 7u);
  const char* order[] = {"z", "t", "f", "i", "d", "s", "a"};  // file order, not sorted
  for (size_t i = 0; i < members.size(); ++i) EXPECT_EQ(members[i].first, order[i]);
  EXPECT_TRUE(v.Find("z")->is_null());
  EXPECT_EQ(*GetBool(v, "t"), true);
  EXPECT_EQ(*GetBool(v, "f"), false);
  EXPECT_EQ(*GetInt(v, "i"), -42);
  EXPECT_EQ(*GetDouble(v, "d"), 0.25);
  EXPECT_FALSE(v.Find("d")->is_integer());
  EXPECT_EQ(*GetString(v, "s"), "h\xC3\xA9\xF0\x9F\x98\x80\n/");
  ASSERT_EQ((*GetArray(v, "a"))->size(), 3u);
  EXPECT_EQ((**GetArray(v, "a"))[2], JsonValue::MakeObject());
}

TEST(JsonValueTest, IntegersKeepTheirExactValue) {
  EXPECT_EQ(MustParse("9007199254740993").int_value(), (int64_t{1} << 53) + 1);
  EXPECT_EQ(MustParse("9223372036854775807").int_value(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(MustParse("-9223372036854775808").int_value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(MustParse("-0").int_value(), 0);
  const JsonValue too_big = MustParse("9223372036854775808");  // only a double can hold it
  EXPECT_FALSE(too_big.is_integer());
  EXPECT_EQ(too_big.double_value(), 9223372036854775808.0);
  EXPECT_FALSE(MustParse("1.0").is_integer());
  EXPECT_FALSE(MustParse("1e3").is_integer());
  EXPECT_EQ(MustParse("4.9406564584124654e-324").double_value(),
            std::numeric_limits<double>::denorm_min());
}

TEST(JsonValueTest, CompactOutputIsSerdeJsons) {
  JsonValue inner = JsonValue::MakeObject();
  inner.Add("n", JsonValue());
  inner.Add("t", JsonValue::Bool(true));
  JsonValue v = JsonValue::MakeObject();
  v.Add("b", JsonValue::MakeArray({JsonValue::Int(1), JsonValue::Double(2.5),
                                   JsonValue::String("x\"\\\x01\x1f\t/\xC3\xA9")}));
  v.Add("a", inner);
  v.Add("e", JsonValue::MakeArray());
  EXPECT_EQ(WriteJson(v, 0),
            "{\"b\":[1,2.5,\"x\\\"\\\\\\u0001\\u001f\\t/\xC3\xA9\"],\"a\":{\"n\":null,\"t\":true},"
            "\"e\":[]}");
}

TEST(JsonValueTest, IndentedOutputIsPythonsJsonDumps) {
  // json.dumps({"metadata": {"total_size": 16}, "weight_map": {"a": "x", "b": [], "c": [1]}},
  //            indent=2)
  const std::string want =
      "{\n  \"metadata\": {\n    \"total_size\": 16\n  },\n  \"weight_map\": {\n"
      "    \"a\": \"x\",\n    \"b\": [],\n    \"c\": [\n      1\n    ]\n  }\n}";
  EXPECT_EQ(WriteJson(MustParse(want), 2), want);
}

TEST(JsonValueTest, DoublesAreWrittenShortestAndReadBackExactly) {
  const double values[] = {0.1,     -2.5e-8, 1e300, 5e-324, std::numeric_limits<double>::max(),
                           1.0 / 3, 3.0,     -0.5,  1e21,   123456789.125};
  for (const double d : values) {
    const std::string text = WriteJson(JsonValue::Double(d), 0);
    const JsonValue back = MustParse(text);
    EXPECT_FALSE(back.is_integer()) << text;
    EXPECT_EQ(back.double_value(), d) << text;
  }
  EXPECT_EQ(WriteJson(JsonValue::Double(0.1), 0), "0.1");
  EXPECT_EQ(WriteJson(JsonValue::Double(3.0), 0), "3.0");
  EXPECT_EQ(WriteJson(JsonValue::Double(std::nan("")), 0), "null");
  EXPECT_EQ(WriteJson(JsonValue::Int(std::numeric_limits<int64_t>::min()), 0),
            "-9223372036854775808");
}

TEST(JsonValueTest, RoundTripsThroughBothLayouts) {
  const std::string text =
      "{\"s\":\"\\u0000nul \\\"q\\\" \\\\ \\u001b \xE2\x82\xAC\",\"n\":[1,-2,0.5,1e-7,null],"
      "\"o\":{\"deep\":[[[{\"x\":false}]]]},\"big\":9223372036854775807}";
  const JsonValue v = MustParse(text);
  EXPECT_EQ(v.Find("s")->string_value().size(), 16u);  // the NUL is kept
  EXPECT_EQ(MustParse(WriteJson(v, 0)), v);
  EXPECT_EQ(MustParse(WriteJson(v, 4)), v);
  EXPECT_EQ(WriteJson(MustParse(WriteJson(v, 0)), 0), WriteJson(v, 0));
}

struct BadJson {
  std::string text;
  std::string error;  // the whole message after "test: "
};

TEST(JsonValueTest, EveryErrorNamesItsByteOffset) {
  const BadJson cases[] = {
      {"", "byte 0: unexpected end of input"},
      {"{\"a\": ", "byte 6: unexpected end of input"},
      {"[1, 2", "byte 5: unexpected end of input"},
      {"{\"a\":1", "byte 6: unexpected end of input"},
      {"\"abc", "byte 4: unexpected end of input"},
      {"\"\\", "byte 2: unexpected end of input"},
      {"\"\\u12", "byte 5: unexpected end of input"},
      {"tru", "byte 3: unexpected end of input"},
      {"1.", "byte 2: unexpected end of input"},
      {"-", "byte 1: unexpected end of input"},
      {"\"a\\x\"", "byte 2: bad escape sequence in a string"},
      {"\"\\u12G4\"", "byte 5: bad hex digit in a \\u escape"},
      {"\"\\ud800\"", "byte 1: unpaired high surrogate"},
      {"\"\\ud800\\u0041\"", "byte 1: unpaired high surrogate"},
      {"\"\\ud800x\"", "byte 1: unpaired high surrogate"},
      {"\"\\ud800\\", "byte 8: unexpected end of input"},
      {"\"\\udc00\"", "byte 1: unpaired low surrogate"},
      {"\"a\nb\"", "byte 2: unescaped control character in a string"},
      {"\"\xff\"", "byte 1: invalid UTF-8 in a string"},
      {"\"\xc0\xaf\"", "byte 1: invalid UTF-8 in a string"},          // overlong '/'
      {"\"\xed\xa0\x80\"", "byte 1: invalid UTF-8 in a string"},      // an encoded surrogate
      {"\"\xf4\x90\x80\x80\"", "byte 1: invalid UTF-8 in a string"},  // past U+10FFFF
      {"1 2", "byte 2: unexpected data after the JSON value"},
      {"{} x", "byte 3: unexpected data after the JSON value"},
      {"{\"a\":1,\"a\":2}", "byte 7: duplicate key \"a\""},
      {"01", "byte 0: leading zero in a number"},
      {"1.x", "byte 2: expected a digit"},
      {"-a", "byte 1: expected a digit"},
      {"1e+", "byte 3: unexpected end of input"},
      {"trux", "byte 0: expected true"},
      {"[1,]", "byte 3: expected a JSON value"},
      {"[1 2]", "byte 3: expected ',' or ']' in an array"},
      {"{\"a\" 1}", "byte 5: expected ':' after an object key"},
      {"{\"a\":1 \"b\":2}", "byte 7: expected ',' or '}' in an object"},
      {"{1:2}", "byte 1: expected a string key in an object"},
      {"NaN", "byte 0: expected a JSON value"},
      {"\xef\xbb\xbf{}", "byte 0: expected a JSON value"},  // a byte order mark
      {"1e999", "byte 0: number out of the range of a double"},
      {std::string(129, '[') + std::string(129, ']'), "byte 128: nesting deeper than 128 levels"},
  };
  for (const BadJson& c : cases) {
    const absl::StatusOr<JsonValue> v = ParseJson(c.text, "test");
    ASSERT_FALSE(v.ok()) << c.text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(v.status().message(), "test: " + c.error) << c.text;
  }
  EXPECT_TRUE(ParseJson(std::string(128, '[') + std::string(128, ']'), "test").ok());
  EXPECT_FALSE(ParseJson(std::string(1000000, '['), "test").ok());  // refused, not recursed
}

TEST(JsonValueTest, AccessorsNameTheKey) {
  const JsonValue v = MustParse("{\"i\": 1, \"d\": 1.5, \"s\": \"x\", \"a\": [1, \"2\"]}");
  EXPECT_EQ(GetInt(v, "missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(GetInt(v, "missing").status().message(), "key \"missing\" is missing");
  EXPECT_EQ(GetInt(v, "d").status().message(), "key \"d\" is a number, expected an integer");
  EXPECT_EQ(GetString(v, "i").status().message(), "key \"i\" is an integer, expected a string");
  EXPECT_EQ(*GetDouble(v, "i"), 1.0);  // an integer is a number too
  EXPECT_EQ(GetBool(v, "s").status().message(), "key \"s\" is a string, expected a boolean");
  EXPECT_EQ(GetObject(v, "a").status().message(), "key \"a\" is an array, expected an object");
  EXPECT_EQ(GetIntArray(v, "a").status().message(),
            "key \"a\": element 1 is a string, expected an integer");
  EXPECT_EQ(GetInt(JsonValue::MakeArray(), "k").status().message(),
            "expected an object holding key \"k\", got an array");
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9"));
  EXPECT_FALSE(IsValidUtf8("h\xC3"));
}

// Whatever the bytes, ParseJson returns; what it accepts writes back to an equal value.
void ParseAndCheck(const std::string& text) {
  const absl::StatusOr<JsonValue> v = ParseJson(text, "fuzz");
  if (!v.ok()) {
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("fuzz: byte ")) << text;
    return;
  }
  for (const int indent : {0, 2}) {
    const absl::StatusOr<JsonValue> back = ParseJson(WriteJson(*v, indent), "rewritten");
    ASSERT_TRUE(back.ok()) << back.status() << " for " << text;
    EXPECT_EQ(*back, *v) << text;
  }
}

TEST(JsonValueTest, FuzzedDocumentsNeverCrash) {
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
}  // namespace zerotrain::checkpoint
