// Command-line flags of //trainer/advisor:advisor, parsed here because //third_party:absl does
// not link Abseil's flags libraries. Counts accept suffixes: 125M, 1.3B, 13e9.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/advisor/memory_estimator.h"

namespace zerotrain::advisor {

// `args` without the program name; --name=value or --name value; booleans also bare (--flag).
// Unknown flags and malformed values are errors naming the flag and value.
absl::StatusOr<AdvisorInput> ParseAdvisorFlags(const std::vector<std::string>& args);

// "1.3B" -> 1300000000; K, M, B (or G), T suffixes; plain integers and 1e9 forms too; not negative.
absl::StatusOr<int64_t> ParseCount(const std::string& flag, const std::string& text);

std::string AdvisorUsage();

}  // namespace zerotrain::advisor
