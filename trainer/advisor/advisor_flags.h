// Command-line flags of //trainer/advisor:advisor, through Abseil's flags library
// (tools/command_line.h). Counts accept suffixes: 125M, 1.3B, 13e9 (parse_count.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/advisor/memory_estimator.h"
#include "trainer/advisor/parse_count.h"

namespace zerotrain::advisor {

// `args` without the program name; --name=value or --name value; booleans also bare (--flag).
// Unknown flags, malformed values and missing required flags are one-line errors naming the
// flag and value. With --help the input is empty: check AdvisorHelpRequested().
absl::StatusOr<AdvisorInput> ParseAdvisorFlags(const std::vector<std::string>& args);

bool AdvisorHelpRequested();

// --help, generated from the flags' help strings.
std::string AdvisorUsage();

}  // namespace zerotrain::advisor
