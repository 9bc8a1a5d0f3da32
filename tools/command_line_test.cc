// ParseCommandLine: both value forms, booleans, defaults restored between parses, and one line
// naming the flag for every kind of bad command line.
#include "tools/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, config, "", "the run config");
ABSL_FLAG(int, steps, 3, "how many steps\nsecond line");
ABSL_FLAG(bool, generate, false, "generate text");
ABSL_FLAG(bool, help, false, "print the flags");

namespace zerotrain::tools {
namespace {

absl::Status Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

std::string Error(std::vector<std::string> args) {
  const absl::Status s = Parse(std::move(args));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(CommandLine, BothFormsAndBooleans) {
  ASSERT_TRUE(Parse({"--config", "a.pbtxt", "--steps=7", "--generate"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_config), "a.pbtxt");
  EXPECT_EQ(absl::GetFlag(FLAGS_steps), 7);
  EXPECT_TRUE(absl::GetFlag(FLAGS_generate));
  EXPECT_TRUE(FlagGiven("config"));
  EXPECT_FALSE(FlagGiven("help"));
  EXPECT_EQ(GivenFlags(),
            (std::vector<std::string>{"--config=a.pbtxt", "--steps=7", "--generate=true"}));
  // A second parse starts from the defaults.
  ASSERT_TRUE(Parse({"--nogenerate", "-h"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_config), "");
  EXPECT_EQ(absl::GetFlag(FLAGS_steps), 3);
  EXPECT_FALSE(absl::GetFlag(FLAGS_generate));
  EXPECT_TRUE(absl::GetFlag(FLAGS_help));
  EXPECT_FALSE(FlagGiven("config"));
}

TEST(CommandLine, BadCommandLinesAreOneLineNamingTheFlag) {
  EXPECT_EQ(Error({"--stepz=3"}), "unknown flag --stepz (see --help)");
  EXPECT_EQ(Error({"--noconfig"}), "unknown flag --noconfig (see --help)");
  EXPECT_EQ(Error({"--steps=many"}),
            "flag --steps has a bad value 'many': Illegal value 'many' specified for flag 'steps' "
            "(see --help)");
  EXPECT_EQ(Error({"--config"}), "flag --config needs a value (--config=VALUE) (see --help)");
  EXPECT_EQ(Error({"--config="}), "flag --config has a bad value '' (see --help)");
  EXPECT_EQ(Error({"a.pbtxt"}),
            "unexpected argument 'a.pbtxt': flags are --name=value (see --help)");
  EXPECT_EQ(Error({"--generate=maybe"}).rfind("flag --generate has a bad value 'maybe'", 0), 0u);
}

TEST(CommandLine, HelpListsTheFlagsOfTheGivenFilesWithTheirHelpStrings) {
  const std::string help = FlagsHelp("usage: prog [flags]\n", {"tools/command_line_test.cc"});
  EXPECT_EQ(help,
            "usage: prog [flags]\n"
            "  --config\n      the run config\n"
            "  --generate=false\n      generate text\n"
            "  --help=false\n      print the flags\n"
            "  --steps=3\n      how many steps\n      second line\n");
  EXPECT_EQ(FlagsHelp("x\n", {"no/such/file.cc"}), "x\n");
}

}  // namespace
}  // namespace zerotrain::tools
