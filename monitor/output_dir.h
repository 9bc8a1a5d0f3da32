// Creating the directory a metrics file goes into, with an error that names the path.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace zerotrain::monitor {

// Creates `dir` and its parents if missing; fails naming `dir` (and what was in the way) when it
// cannot be created or is not a writable directory. `what` names the option, e.g.
// "csv_output_path".
absl::Status MakeOutputDir(const std::string& dir, const std::string& what);

// This machine's host name, "localhost" if it cannot be read.
std::string HostName();

}  // namespace zerotrain::monitor
