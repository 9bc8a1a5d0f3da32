// QuantizedReduceScatterAsync: an averaging reduce-scatter whose wire is INT8 blocks, exchanged in
// two all-to-alls, ZeRO++'s quantized gradients (qgZ). The ranks are numbered node by node, k per
// node (r = node * k + local). Each rank cuts its input into world_size chunks (chunk r is rank
// r's shard), quantizes every chunk (int8_parts.h) and sends its node peers, in one all-to-all
// within the node, the chunks of the shards whose local index is theirs; each sums what it
// received, in fp32, into partial sums for one shard per node, quantizes those and sends each to
// its node in one all-to-all among the ranks of its local index on every node; the sum of those
// partials over the world size is this rank's shard of the average. Per rank and per element of
// the input, about (k-1)/k bytes stay within the node and (nodes-1)/nodes/k bytes cross nodes,
// against 4 (fp32) each way for the reduce-scatter it replaces. Each value is quantized twice, so
// an element of the result is off by up to half a scale of each block it passed through.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "comm/work.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::comm {

// intra: the k ranks of this rank's node, in order; inter: the ranks of this rank's local index
// on every node, in node order. Either may have one rank (then its exchange is a copy).
struct TwoLevelGroups {
  ProcessGroup* intra = nullptr;
  ProcessGroup* inter = nullptr;
};

// This rank's two groups, made from group.node_of_rank(): every node must hold as many ranks,
// numbered node by node (as torchrun, Slurm's block distribution and mpirun --map-by node... do
// not all guarantee: the error names the layout found). Collective over `group`.
struct NodeGroups {
  std::unique_ptr<ProcessGroup> intra, inter;
  TwoLevelGroups view() const { return {intra.get(), inter.get()}; }
};
absl::StatusOr<NodeGroups> SplitByNode(ProcessGroup& group);

// `input`: n elements, n a multiple of the world size (k * nodes), float, bfloat16 or half;
// `output`: n / world elements of the input's dtype, this rank's shard of the average. Quantizes
// and launches the node's all-to-all at once; the rest runs when the Work is waited for (in the
// same order on every rank: the second exchange is launched there).
Work QuantizedReduceScatterAsync(const TwoLevelGroups& groups, at::Tensor input, at::Tensor output,
                                 SimdPath simd = SimdPath::kAuto);

}  // namespace zerotrain::comm
