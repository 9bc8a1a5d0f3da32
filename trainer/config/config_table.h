// The effective configuration as the table rank 0 prints when training starts: a header line, then
// one `  name ..... value` line per setting, the form DeepSpeed users know from the start of a
// DeepSpeedEngine log, so they can find a setting (and diff two runs) the same way.
#pragma once

#include <string>

#include "trainer/config/config.pb.h"

namespace zerotrain::trainer {

// "zerotrain configuration (effective):" and one line per leaf field of `config` with defaults
// filled in (the same fields --print_config writes), sorted by dotted name
// (`zero_optimization.stage`), dot-padded so every value starts in one column; values are written
// as a pbtxt writes them (strings quoted, lists as [a, b]). Each line ends in '\n'.
std::string ConfigTable(const TrainerConfigProto& config);

}  // namespace zerotrain::trainer
