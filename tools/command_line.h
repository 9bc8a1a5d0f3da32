// Command lines of zerotrain's binaries through Abseil's flags (ABSL_FLAG, Debian's libabsl-dev):
// each binary declares its flags with their help strings, and this parses argv against them with
// the project's rules for bad input: one line naming the flag and the value, never a usage dump.
// Abseil's own ParseCommandLine exits 1 with several lines instead, so only its flag registry and
// value parsing (absl/flags/reflection.h) are used here.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace zerotrain::tools {

// Sets the flags named on argv[1..]: --name=value and --name value; booleans bare (--name is
// true, --noname false) or --name=true/false. Every flag is first reset to its default, so a
// process may parse more than one command line (tests). Errors (InvalidArgument, one line): an
// unknown flag, a bad or missing value, an argument that is not a flag. --help and -h set the flag
// `help`.
absl::Status ParseCommandLine(int argc, const char* const* argv);

// Whether the last ParseCommandLine saw --name.
bool FlagGiven(absl::string_view name);

// The flags as they were given, "--name=value", in command-line order.
std::vector<std::string> GivenFlags();

// `--help`: `intro` (ending in a newline), then one entry per flag defined in a file whose path
// ends with one of `files`, sorted by name: "  --name=<default>" and its help string, indented.
std::string FlagsHelp(absl::string_view intro, const std::vector<std::string>& files);

}  // namespace zerotrain::tools
