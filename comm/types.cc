// Shard arithmetic and op descriptions for comm/types.h.
#include "comm/types.h"

#include <c10/core/ScalarType.h>

#include "absl/strings/str_format.h"

namespace zerotrain::comm {

const char* CollectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

int64_t ShardNumel(int64_t numel, int world_size) { return (numel + world_size - 1) / world_size; }

int64_t PaddedNumel(int64_t numel, int world_size) {
  return ShardNumel(numel, world_size) * world_size;
}

ShardRange ShardOf(int64_t numel, int world_size, int rank) {
  const int64_t shard = ShardNumel(numel, world_size);
  ShardRange r;
  r.begin = std::min(numel, shard * rank);
  r.end = std::min(numel, shard * (rank + 1));
  return r;
}

int64_t OpDesc::bytes() const { return numel * static_cast<int64_t>(c10::elementSize(dtype)); }

std::string Describe(const OpDesc& op) {
  std::string what;
  switch (op.kind) {
    case CollectiveKind::kBarrier:
      what = "";
      break;
    case CollectiveKind::kBroadcast:
      what = absl::StrFormat(" (root %d, %d x %s)", op.root, op.numel, c10::toString(op.dtype));
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
      what = absl::StrFormat(" (%d x %s)", op.numel, c10::toString(op.dtype));
      break;
    default:
      what = absl::StrFormat(" (%s, %d x %s)", ReduceOpName(op.reduce), op.numel,
                             c10::toString(op.dtype));
  }
  return absl::StrFormat("%s #%d%s on rank %d of %d", CollectiveName(op.kind), op.seq, what,
                         op.rank, op.world_size);
}

}  // namespace zerotrain::comm
