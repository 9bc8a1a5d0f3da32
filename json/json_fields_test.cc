// The field accessors' messages, and Write against the bytes serde_json and Python's json.dumps
// produce for the same values.
#include "json/json_fields.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "gtest/gtest.h"
#include "json/strict_json.h"

namespace zerotrain::json {
namespace {

Json MustParse(absl::string_view text) {
  absl::StatusOr<Json> v = ParseStrict(text, "test");
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : Json();
}

TEST(JsonFieldsTest, AccessorsNameTheKeyAndTheKinds) {
  const Json v = MustParse("{\"i\": 1, \"d\": 1.5, \"s\": \"x\", \"a\": [1, \"2\"], \"n\": null}");
  EXPECT_EQ(GetInt(v, "missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(GetInt(v, "missing").status().message(), "key \"missing\" is missing");
  EXPECT_EQ(GetInt(v, "d").status().message(), "key \"d\" is a number, expected an integer");
  EXPECT_EQ(GetString(v, "i").status().message(), "key \"i\" is an integer, expected a string");
  EXPECT_EQ(*GetDouble(v, "i"), 1.0);  // an integer is a number too
  EXPECT_EQ(GetBool(v, "s").status().message(), "key \"s\" is a string, expected a boolean");
  EXPECT_EQ(GetObject(v, "a").status().message(), "key \"a\" is an array, expected an object");
  EXPECT_EQ(GetArray(v, "n").status().message(), "key \"n\" is null, expected an array");
  EXPECT_EQ(GetIntArray(v, "a").status().message(),
            "key \"a\": element 1 is a string, expected an integer");
  EXPECT_EQ(GetInt(Json::array(), "k").status().message(),
            "expected an object holding key \"k\", got an array");
  EXPECT_EQ(*GetString(v, "s"), "x");
  EXPECT_EQ((*GetArray(v, "a"))->size(), 2u);
  Json built = Json::object();
  built["u"] = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(GetInt(built, "u").status().message(), "key \"u\" is beyond int64's range");
}

TEST(JsonFieldsTest, Utf8IsChecked) {
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("h\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));  // an encoded surrogate
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));      // overlong
}

TEST(JsonFieldsTest, CompactOutputIsSerdeJsons) {
  Json inner = Json::object();
  inner["n"] = nullptr;
  inner["t"] = true;
  Json v = Json::object();
  v["b"] = Json::array({1, 2.5, "x\"\\\x01\x1f\t/\xC3\xA9"});
  v["a"] = inner;
  v["e"] = Json::array();
  EXPECT_EQ(Write(v, 0),
            "{\"b\":[1,2.5,\"x\\\"\\\\\\u0001\\u001f\\t/\xC3\xA9\"],\"a\":{\"n\":null,\"t\":true},"
            "\"e\":[]}");
}

TEST(JsonFieldsTest, IndentedOutputIsPythonsJsonDumps) {
  // json.dumps({"metadata": {"total_size": 16}, "weight_map": {"a": "x", "b": [], "c": [1]}},
  //            indent=2)
  const std::string want =
      "{\n  \"metadata\": {\n    \"total_size\": 16\n  },\n  \"weight_map\": {\n"
      "    \"a\": \"x\",\n    \"b\": [],\n    \"c\": [\n      1\n    ]\n  }\n}";
  EXPECT_EQ(Write(MustParse(want), 2), want);
}

TEST(JsonFieldsTest, DoublesAreWrittenShortestAndReadBackExactly) {
  const double values[] = {0.1,     -2.5e-8, 1e300, 5e-324, std::numeric_limits<double>::max(),
                           1.0 / 3, 3.0,     -0.5,  1e21,   123456789.125};
  for (const double d : values) {
    const std::string text = Write(Json(d), 0);
    const Json back = MustParse(text);
    EXPECT_FALSE(back.is_number_integer()) << text;
    EXPECT_EQ(back.get<double>(), d) << text;
  }
  EXPECT_EQ(Write(Json(0.1), 0), "0.1");
  EXPECT_EQ(Write(Json(3.0), 0), "3.0");
  EXPECT_EQ(Write(Json(1e-7), 0), "1e-07");  // as Python's repr
  EXPECT_EQ(Write(Json(std::nan("")), 0), "null");
  EXPECT_EQ(Write(Json(std::numeric_limits<int64_t>::min()), 0), "-9223372036854775808");
}

TEST(JsonFieldsTest, RoundTripsThroughBothLayouts) {
  const std::string text =
      "{\"s\":\"\\u0000nul \\\"q\\\" \\\\ \\u001b \xE2\x82\xAC\",\"n\":[1,-2,0.5,1e-7,null],"
      "\"o\":{\"deep\":[[[{\"x\":false}]]]},\"big\":9223372036854775807}";
  const Json v = MustParse(text);
  EXPECT_EQ(v["s"].get<std::string>().size(), 16u);  // the NUL is kept
  EXPECT_EQ(MustParse(Write(v, 0)), v);
  EXPECT_EQ(MustParse(Write(v, 4)), v);
  EXPECT_EQ(Write(MustParse(Write(v, 0)), 0), Write(v, 0));
}

}  // namespace
}  // namespace zerotrain::json
