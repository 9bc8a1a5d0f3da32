// The quantized all-gather (see quantized_all_gather.h): every rank's part of the gathered byte
// buffer is its shard's INT8 wire form (int8_parts.h).
#include "comm/quantized_all_gather.h"

#include <ATen/ops/empty.h>

#include "absl/strings/str_cat.h"
#include "comm/int8_parts.h"
#include "comm/types.h"

namespace zerotrain::comm {
namespace {

absl::Status Check(const ProcessGroup& group, const at::Tensor& shard, const at::Tensor& output) {
  if (!shard.defined() || !output.defined()) {
    return absl::InvalidArgumentError("quantized all_gather: undefined tensor");
  }
  const at::ScalarType t = output.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) {
    return absl::InvalidArgumentError(absl::StrCat("quantized all_gather: dtype ", c10::toString(t),
                                                   " is not float, bfloat16 or half"));
  }
  if (shard.scalar_type() != t || !shard.is_contiguous() || !output.is_contiguous() ||
      shard.numel() != ShardNumel(output.numel(), group.world_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantized all_gather: the shard (", shard.numel(), " x ",
        c10::toString(shard.scalar_type()), ") must be the contiguous ShardNumel(", output.numel(),
        ", ", group.world_size(), ") = ", ShardNumel(output.numel(), group.world_size()),
        " elements of the output's dtype"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t QuantizedShardBytes(int64_t shard_numel) { return Int8PartOf(shard_numel).bytes; }

Work QuantizedAllGatherAsync(ProcessGroup& group, at::Tensor shard, at::Tensor output,
                             const QuantizedGatherOptions& options) {
  OpDesc op;
  op.kind = CollectiveKind::kAllGather;
  op.rank = group.rank();
  op.world_size = group.world_size();
  op.dtype = output.defined() ? output.scalar_type() : at::kFloat;
  op.numel = output.defined() ? output.numel() : 0;
  auto fail = [&op](absl::Status s) { return Work(op, {[s] { return s; }}, nullptr); };
  absl::Status valid = Check(group, shard, output);
  if (!valid.ok()) return fail(valid);
  const int world = group.world_size();
  const Int8Part l = Int8PartOf(shard.numel());
  at::Tensor gathered = at::empty({world * l.bytes}, output.options().dtype(at::kByte));
  at::Tensor mine = gathered.narrow(0, group.rank() * l.bytes, l.bytes);
  // A part that cannot be quantized still goes out (zeros), so the ranks' collectives stay
  // paired; the error is this rank's result.
  absl::Status quantized = QuantizePart(shard, mine, options.simd);
  if (!quantized.ok()) mine.zero_();
  Work transfer = group.AllGatherAsync(mine, gathered);
  auto dequantize = [gathered, output, l, world, quantized, simd = options.simd]() -> absl::Status {
    if (!quantized.ok()) return quantized;
    const int64_t n = output.numel();
    for (int r = 0; r < world; ++r) {
      const ShardRange range = ShardOf(n, world, r);
      if (range.size() == 0) continue;
      absl::Status s = DequantizePart(gathered.narrow(0, r * l.bytes, l.bytes), l.numel,
                                      output.narrow(0, range.begin, range.size()), simd);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  // Dequantizing has no stream form of its own: it runs once, as soon as the transfer is
  // ordered (on a device its operations queue on the caller's stream), and drops its buffers.
  return Work(transfer.op(), {[transfer]() mutable { return transfer.Wait(); }, dequantize},
              {[transfer]() mutable { return transfer.WaitOnStream(); }, nullptr}, nullptr);
}

absl::Status QuantizedAllGather(ProcessGroup& group, at::Tensor shard, at::Tensor output,
                                const QuantizedGatherOptions& options) {
  return QuantizedAllGatherAsync(group, std::move(shard), std::move(output), options).Wait();
}

}  // namespace zerotrain::comm
