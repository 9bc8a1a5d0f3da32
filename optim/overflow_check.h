// The fused inf/NaN check over flat gradient shards that decides whether a mixed-precision step
// overflowed (and so is skipped while the loss scale drops). The caller ORs the result across
// ranks.
#pragma once

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "optim/precision.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim {

struct GradReductionOptions {
  int threads = 0;  // 0 = all cores
  SimdPath simd = SimdPath::kAuto;
};

// True when any element of any shard is +-inf or NaN. Stops early once one is found.
absl::StatusOr<bool> HasInfOrNan(absl::Span<const GradShard> shards,
                                 const GradReductionOptions& options = {});

}  // namespace zerotrain::optim
