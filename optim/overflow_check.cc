// HasInfOrNan: chunks of every shard checked in parallel by the per-ISA kernels.
#include "optim/overflow_check.h"

#include <atomic>
#include <vector>

#include "optim/shard_step.h"
#include "tools/status_macros.h"

namespace zerotrain::optim {

absl::StatusOr<bool> HasInfOrNan(absl::Span<const GradShard> shards,
                                 const GradReductionOptions& options) {
  ZT_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, internal::CheckGradShards(shards));
  std::atomic<bool> found{false};
  ZT_RETURN_IF_ERROR(internal::RunOnShards(
      options.simd, options.threads, sizes,
      [&](const internal::KernelTable& table, int64_t, size_t s, int64_t begin, int64_t end) {
        if (found.load(std::memory_order_relaxed)) return;
        if (table.has_inf_or_nan(shards[s].data, shards[s].dtype, begin, end)) {
          found.store(true, std::memory_order_relaxed);
        }
      }));
  return found.load();
}

}  // namespace zerotrain::optim
