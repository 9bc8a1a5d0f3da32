// The ZeRO advisor: picks a stage and offload from the model-state estimates by the decision
// framework (fits on one device -> 0 or 1; optimizer states do not fit -> 1; larger batches -> 2,
// with CPU offload when that is what fits; model does not fit -> 3 with CPU or NVMe offload), and
// formats the report //trainer:main prints for --estimate_memory.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/advisor/memory_estimator.h"

namespace zerotrain::advisor {

struct Recommendation {
  int stage = 0;
  Offload offload = Offload::kNone;
  bool nvme = false;        // offload to NVMe instead of CPU memory (host memory too small)
  bool fits = true;         // false: not even stage 3 with full offload fits the device
  std::string explanation;  // two or three lines, each ending in '\n'
};

// "ZeRO stage 2 + optimizer offload to CPU" and the like.
std::string ConfigurationName(int stage, Offload offload, bool nvme = false);

absl::StatusOr<Recommendation> Recommend(const AdvisorInput& in);

// The table of stages x offload with GiB per device and per host and what fits.
std::string FormatEstimateTable(const AdvisorInput& in, const std::vector<StageEstimate>& rows);

// The whole report: inputs, table, recommendation. Errors name the bad field.
absl::StatusOr<std::string> EstimateMemoryReport(const AdvisorInput& in);

}  // namespace zerotrain::advisor
