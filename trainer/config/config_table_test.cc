// ConfigTable: the header, one aligned `name ... value` line per field in pbtxt spelling, sorted,
// and complete: the lines, turned back into protobuf text one by one, rebuild the configuration
// with its defaults filled in.
#include "trainer/config/config_table.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "trainer/config/config_loader.h"

namespace zerotrain::trainer {
namespace {

using ::testing::HasSubstr;

constexpr char kPbtxt[] = R"pb(
  train_micro_batch_size_per_gpu: 4
  zero_optimization {
    stage: 3
    offload_optimizer { device: "cpu" }
  }
  optimizer {
    type: "AdamW"
    params {
      lr: 2e-4
      betas: [ 0.9, 0.95 ]
    }
  }
  run { device: "cpu" steps: 12 }
)pb";

TrainerConfigProto Parse(const std::string& text) {
  absl::StatusOr<TrainerConfigProto> c = ParsePbtxt(text, "test");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : TrainerConfigProto();
}

std::vector<std::string> Lines(const std::string& table) {
  std::vector<std::string> lines = absl::StrSplit(table, '\n');
  EXPECT_EQ(lines.back(), "");  // every line ends in '\n'
  lines.pop_back();
  return lines;
}

TEST(ConfigTable, HeaderThenOneAlignedLinePerFieldInPbtxtSpelling) {
  const std::string table = ConfigTable(Parse(kPbtxt));
  const std::vector<std::string> lines = Lines(table);
  ASSERT_GT(lines.size(), 10u);
  EXPECT_EQ(lines[0], "zerotrain configuration (effective):");
  // The values given, each as the pbtxt writes it.
  EXPECT_THAT(table, HasSubstr(" zero_optimization.stage ....."));
  for (const char* pattern :
       {R"(\n  zero_optimization\.stage \.{3,} 3\n)",
        R"(\n  zero_optimization\.offload_optimizer\.device \.{3,} "cpu"\n)",
        R"(\n  optimizer\.params\.lr \.{3,} 0\.0002\n)",
        R"(\n  optimizer\.params\.betas \.{3,} \[0\.9, 0\.95\]\n)",
        R"(\n  optimizer\.type \.{3,} "AdamW"\n)", R"(\n  run\.steps \.{3,} 12\n)",
        // Defaults the input leaves out are there too.
        R"(\n  fp16\.initial_scale_power \.{3,} 16\n)",
        R"(\n  checkpoint\.tag_validation \.{3,} "Warn"\n)",
        R"(\n  bf16\.enabled \.{3,} false\n)"}) {
    EXPECT_TRUE(std::regex_search(table, std::regex(pattern))) << pattern << "\n" << table;
  }
  // One column for the values, sorted names, at least three dots on the longest.
  const std::regex row(R"(  ([a-z0-9_.\[\]]+) (\.+) (\S.*))");
  size_t column = 0;
  std::string previous;
  bool some_line_has_three_dots = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, row)) << lines[i];
    const size_t at = static_cast<size_t>(m.position(3));
    if (column == 0) column = at;
    EXPECT_EQ(at, column) << lines[i];
    EXPECT_GE(m[2].length(), 3) << lines[i];
    some_line_has_three_dots |= m[2].length() == 3;
    EXPECT_LT(previous, m[1].str());
    previous = m[1].str();
  }
  EXPECT_TRUE(some_line_has_three_dots);
}

TEST(ConfigTable, LinesRebuildTheConfigWithDefaultsFilled) {
  const TrainerConfigProto config = Parse(kPbtxt);
  const std::vector<std::string> lines = Lines(ConfigTable(config));
  TrainerConfigProto rebuilt;
  const std::regex row(R"(  ([a-z0-9_.]+) \.+ (.+))");
  for (size_t i = 1; i < lines.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, row)) << lines[i];
    // a.b.c v  ->  a { b { c: v } }
    const std::vector<std::string> path = absl::StrSplit(m[1].str(), '.');
    std::ostringstream text;
    for (size_t j = 0; j + 1 < path.size(); ++j) text << path[j] << " { ";
    text << path.back() << ": " << m[2].str();
    for (size_t j = 0; j + 1 < path.size(); ++j) text << " }";
    rebuilt.MergeFrom(Parse(text.str()));
  }
  TrainerConfigProto filled = config;
  FillDefaults(&filled);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(rebuilt, filled))
      << rebuilt.DebugString() << "\nvs\n"
      << filled.DebugString();
}

}  // namespace
}  // namespace zerotrain::trainer
