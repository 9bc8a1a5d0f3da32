// The two-level quantized reduce-scatter (see quantized_reduce_scatter.h). The send buffer of the
// node's exchange holds world_size INT8 parts of one shard chunk each, ordered [local peer][node],
// so block l of the all-to-all is everything local peer l reduces.
#include "comm/quantized_reduce_scatter.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/int8_parts.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

absl::Status Check(const TwoLevelGroups& g, const at::Tensor& input, const at::Tensor& output) {
  if (g.intra == nullptr || g.inter == nullptr || !input.defined() || !output.defined()) {
    return absl::InvalidArgumentError("quantized reduce_scatter: missing group or tensor");
  }
  const int64_t world = static_cast<int64_t>(g.intra->world_size()) * g.inter->world_size();
  const at::ScalarType t = input.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantized reduce_scatter: dtype ", c10::toString(t), " is not float, bfloat16 or half"));
  }
  if (output.scalar_type() != t || !input.is_contiguous() || !output.is_contiguous() ||
      input.numel() % world != 0 || output.numel() != input.numel() / world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantized reduce_scatter: the input (", input.numel(), ") must be a multiple of the ",
        world, " ranks and the output (", output.numel(), ") its share, of one dtype, contiguous"));
  }
  return absl::OkStatus();
}

// Adds each of `parts` (`count` INT8 parts of m elements, end to end) into acc (fp32, m).
absl::Status AddParts(const at::Tensor& parts, int64_t first, int64_t count, int64_t m,
                      at::Tensor acc, SimdPath simd) {
  const int64_t bytes = Int8PartOf(m).bytes;
  at::Tensor one = at::empty({m}, acc.options());
  for (int64_t i = first; i < first + count; ++i) {
    ZT_RETURN_IF_ERROR(DequantizePart(parts.narrow(0, i * bytes, bytes), m, one, simd));
    acc.add_(one);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NodeGroups> SplitByNode(ProcessGroup& group) {
  const std::vector<int>& node_of = group.node_of_rank();
  const int world = group.world_size();
  int per_node = 0;
  while (per_node < world && node_of[per_node] == 0) ++per_node;
  bool blocks = per_node > 0 && world % per_node == 0;
  for (int r = 0; blocks && r < world; ++r) blocks = node_of[r] == r / per_node;
  if (!blocks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ZeRO++ quantized gradients need every node to hold as many ranks, numbered node by "
        "node; the nodes of ranks 0..",
        world - 1, " are ", absl::StrJoin(node_of, ",")));
  }
  const int node = group.rank() / per_node, local = group.rank() % per_node;
  std::vector<int> intra, inter;
  for (int l = 0; l < per_node; ++l) intra.push_back(node * per_node + l);
  for (int nd = 0; nd < world / per_node; ++nd) inter.push_back(nd * per_node + local);
  NodeGroups g;
  ZT_ASSIGN_OR_RETURN(g.intra, group.CreateSubgroup(intra));
  ZT_ASSIGN_OR_RETURN(g.inter, group.CreateSubgroup(inter));
  return g;
}

Work QuantizedReduceScatterAsync(const TwoLevelGroups& g, at::Tensor input, at::Tensor output,
                                 SimdPath simd) {
  OpDesc op;
  op.kind = CollectiveKind::kReduceScatter;
  op.reduce = ReduceOp::kAvg;
  op.dtype = input.defined() ? input.scalar_type() : at::kFloat;
  op.numel = input.defined() ? input.numel() : 0;
  auto fail = [&op](absl::Status s) { return Work(op, {[s] { return s; }}, nullptr); };
  if (absl::Status s = Check(g, input, output); !s.ok()) return fail(s);
  const int k = g.intra->world_size(), nodes = g.inter->world_size(), world = k * nodes;
  op.rank = g.inter->rank() * k + g.intra->rank();
  op.world_size = world;
  const int64_t m = input.numel() / world;
  const int64_t bytes = Int8PartOf(m).bytes;
  const at::TensorOptions f32 = input.options().dtype(at::kFloat);
  // Within the node: chunk (node nd, local l) goes to peer l, as part l * nodes + nd.
  // A rank that fails locally still makes both exchanges (with zeros), so the ranks' collectives
  // stay paired; the first such error is its result.
  absl::Status local;
  at::Tensor received;
  Work first;
  if (k > 1) {
    at::Tensor send = at::zeros({world * bytes}, input.options().dtype(at::kByte));
    for (int l = 0; l < k && local.ok(); ++l) {
      for (int nd = 0; nd < nodes && local.ok(); ++nd) {
        local = QuantizePart(input.narrow(0, (nd * k + l) * m, m),
                             send.narrow(0, (l * nodes + nd) * bytes, bytes), simd);
      }
    }
    if (!local.ok()) send.zero_();
    received = at::empty_like(send);
    first = g.intra->AllToAllAsync(send, received);
  }
  auto rest = [g, input, output, received, k, nodes, world, m, bytes, f32, simd,
               local]() mutable -> absl::Status {
    // Partial sums over the node, for shard (nd, local) of every node nd.
    at::Tensor partial = at::zeros({nodes * m}, f32);
    for (int nd = 0; nd < nodes && local.ok(); ++nd) {
      at::Tensor acc = partial.narrow(0, nd * m, m);
      if (k == 1) {
        acc.copy_(input.narrow(0, nd * m, m));
        continue;
      }
      for (int l = 0; l < k && local.ok(); ++l) {
        local = AddParts(received, l * nodes + nd, 1, m, acc, simd);
      }
    }
    at::Tensor sum = partial;
    if (nodes > 1) {  // across nodes: partial nd goes to node nd
      at::Tensor send = at::zeros({nodes * bytes}, f32.dtype(at::kByte));
      for (int nd = 0; nd < nodes && local.ok(); ++nd) {
        local = QuantizePart(partial.narrow(0, nd * m, m), send.narrow(0, nd * bytes, bytes), simd);
      }
      if (!local.ok()) send.zero_();
      at::Tensor back = at::empty_like(send);
      ZT_RETURN_IF_ERROR(g.inter->AllToAll(send, back));
      ZT_RETURN_IF_ERROR(local);
      sum = at::zeros({m}, f32);
      ZT_RETURN_IF_ERROR(AddParts(back, 0, nodes, m, sum, simd));
    }
    ZT_RETURN_IF_ERROR(local);
    output.copy_(sum.div_(world));
    return absl::OkStatus();
  };
  return Work(op, {[first]() mutable { return first.Wait(); }, rest}, nullptr);
}

}  // namespace zerotrain::comm
