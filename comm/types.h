// Vocabulary shared by every comm backend: reduction ops, collective kinds, shard arithmetic and
// the description of one collective call that errors and logs are phrased in.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace zerotrain::comm {

enum class ReduceOp { kSum, kAvg, kMax };

enum class CollectiveKind {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier,
  kAllToAll
};

const char* CollectiveName(CollectiveKind kind);
const char* ReduceOpName(ReduceOp op);

// Flat buffers of `numel` elements are split into `world_size` equal shards; the last shard is
// padded with zeros when numel is not a multiple of world_size. Callers that allocate
// PaddedNumel() elements themselves let reduce-scatter and all-gather run without a copy.
int64_t ShardNumel(int64_t numel, int world_size);
int64_t PaddedNumel(int64_t numel, int world_size);

// The part of [0, numel) that rank `rank`'s shard covers: [begin, end). end - begin is smaller
// than ShardNumel() (possibly 0) for the ranks whose shard reaches into the padding.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange ShardOf(int64_t numel, int world_size, int rank);

// One collective call as issued by this rank; `numel` is the element count that every rank must
// pass identically (the full flat size for reduce-scatter and all-gather).
struct OpDesc {
  CollectiveKind kind = CollectiveKind::kBarrier;
  uint64_t seq = 0;
  int rank = 0;
  int world_size = 1;
  ReduceOp reduce = ReduceOp::kSum;
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0;
  int root = 0;

  int64_t bytes() const;
};

// "all_reduce #17 (sum, 1000 x Float) on rank 1 of 4": the context every comm error carries.
std::string Describe(const OpDesc& op);

}  // namespace zerotrain::comm
