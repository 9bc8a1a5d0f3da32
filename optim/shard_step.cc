// Option checks and the chunked parallel loop of shard_step.h.
#include "optim/shard_step.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/parallel.h"
#include "tools/status_macros.h"

namespace zerotrain::optim::internal {

absl::Status CheckRange(absl::string_view field, double value, double lo, double hi,
                        bool hi_inclusive) {
  const bool above = hi_inclusive ? value > hi : value >= hi;
  if (!std::isfinite(value) || value < lo || above) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", value, " is outside [", lo, ", ", hi, hi_inclusive ? "]" : ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckShard(absl::string_view shard_kind, size_t index, int64_t size,
                        std::initializer_list<NamedPointer> pointers) {
  if (size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(shard_kind, "[", index, "].size = ", size, " is negative"));
  }
  if (size == 0) return absl::OkStatus();
  for (const NamedPointer& p : pointers) {
    if (p.pointer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          shard_kind, "[", index, "].", p.name, " is null for a shard of ", size, " elements"));
    }
  }
  return absl::OkStatus();
}

int64_t CountChunks(absl::Span<const int64_t> sizes) {
  return static_cast<int64_t>(SplitIntoChunks(sizes).size());
}

absl::Status RunOnShards(SimdPath simd, int threads, absl::Span<const int64_t> sizes,
                         const ChunkKernel& kernel) {
  if (threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads = ", threads, " is negative"));
  }
  ZT_ASSIGN_OR_RETURN(const SimdPath path, ResolveSimdPath(simd));
  const KernelTable& table = KernelTableFor(path);
  const std::vector<Chunk> chunks = SplitIntoChunks(sizes);
  RunTasks(ResolveThreadCount(threads), static_cast<int64_t>(chunks.size()), [&](int64_t t) {
    const Chunk& c = chunks[t];
    kernel(table, t, c.shard, c.begin, c.end);
  });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> CheckGradShards(absl::Span<const GradShard> shards) {
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < shards.size(); ++i) {
    absl::Status s = CheckShard("GradShard", i, shards[i].size, {{"data", shards[i].data}});
    if (!s.ok()) return s;
    sizes.push_back(shards[i].size);
  }
  return sizes;
}

}  // namespace zerotrain::optim::internal
