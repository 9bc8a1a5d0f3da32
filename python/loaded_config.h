// A ds_config as zerotrain._C.Config holds it: //trainer:main's validated TrainerConfig (the
// Engine's options and the resolved batch triple among it) and the warnings loading it gave.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainer/config/config_validate.h"

namespace zerotrain::python {

struct LoadedConfig {
  trainer::TrainerConfig config;
  std::vector<std::string> warnings;
};

// A ds_config file, or (json_text set) a dict's JSON that errors name `path`, read by
// trainer/config's loader and validated for `world_size` ranks; raises ValueError naming the field.
LoadedConfig LoadConfig(const std::string& path, const std::optional<std::string>& json_text,
                        int world_size);

}  // namespace zerotrain::python
