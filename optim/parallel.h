// Splits a list of flat shards into cache-sized chunks and runs them on a few threads. Work is
// handed out through one atomic counter, so a hundred small tensors cost one fork/join per
// optimizer step, not one per tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"

namespace zerotrain::optim {

// Elements per chunk: 16K fp32 elements of the ~7 streams an Adam step touches fit in L2, and the
// count is a multiple of every vector width, so chunk starts keep the shard's alignment.
inline constexpr int64_t kChunkElements = 1 << 14;

struct Chunk {
  int32_t shard;
  int64_t begin;
  int64_t end;
};

// Chunks covering [0, sizes[s]) for every shard s, in order; empty shards contribute none.
std::vector<Chunk> SplitIntoChunks(absl::Span<const int64_t> sizes,
                                   int64_t chunk_elements = kChunkElements);

// Calls task(i) for every i in [0, num_tasks) on min(threads, num_tasks) threads, the caller's
// thread among them, and returns when all are done.
void RunTasks(int threads, int64_t num_tasks, const std::function<void(int64_t)>& task);

}  // namespace zerotrain::optim
