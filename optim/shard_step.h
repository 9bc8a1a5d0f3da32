// What every optimizer front end (adam.cc, sgd.cc, adagrad.cc) shares: checks of options and
// shard pointers that name the offending field and value, and the loop that runs a kernel over
// all shards' chunks on the requested threads.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "optim/kernels.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim::internal {

// OK when lo <= value < hi (or <= hi when hi_inclusive) and value is finite.
absl::Status CheckRange(absl::string_view field, double value, double lo, double hi,
                        bool hi_inclusive = true);

struct NamedPointer {
  const char* name;
  const void* pointer;
};

// OK when size >= 0 and, for a non-empty shard, every pointer is non-null.
absl::Status CheckShard(absl::string_view shard_kind, size_t index, int64_t size,
                        std::initializer_list<NamedPointer> pointers);

// Checks every gradient shard (CheckShard with its data pointer) and returns their sizes, the
// shape RunOnShards takes.
absl::StatusOr<std::vector<int64_t>> CheckGradShards(absl::Span<const GradShard> shards);

// `chunk` numbers the chunks 0, 1, ... in shard order, so reductions can keep one partial
// result per chunk and add them up in a fixed order.
using ChunkKernel = std::function<void(const KernelTable&, int64_t chunk, size_t shard,
                                       int64_t begin, int64_t end)>;

// Number of chunks RunOnShards cuts `sizes` into.
int64_t CountChunks(absl::Span<const int64_t> sizes);

// Resolves `simd` and `threads`, cuts every shard (sizes[s] elements) into chunks and calls
// kernel on each, spread over the threads.
absl::Status RunOnShards(SimdPath simd, int threads, absl::Span<const int64_t> sizes,
                         const ChunkKernel& kernel);

}  // namespace zerotrain::optim::internal
