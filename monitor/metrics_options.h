// MetricsOptions: which monitors the trainer writes (DeepSpeed's csv_monitor and tensorboard
// sections) and where.
#pragma once

#include <string>

namespace zerotrain::monitor {

struct MetricsOptions {
  bool csv = false;
  std::string csv_output_path;  // directory; the run writes <path>/<job_name>/metrics.csv
  bool tensorboard = false;
  std::string tensorboard_output_path;  // directory; events.out.tfevents.* under <path>/<job_name>
  std::string job_name = "zerotrain";
};

}  // namespace zerotrain::monitor
