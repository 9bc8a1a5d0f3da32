// Parameter counts as people write them on a command line: 125M, 1.3B, 13e9.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::advisor {

// "1.3B" -> 1300000000; K, M, B (or G), T suffixes; plain integers and 1e9 forms too; not
// negative. An InvalidArgument naming `flag` and the text otherwise.
absl::StatusOr<int64_t> ParseCount(const std::string& flag, const std::string& text);

}  // namespace zerotrain::advisor
