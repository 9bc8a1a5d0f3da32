// The quantized all-gather (see quantized_all_gather.h). A rank's part of the gathered byte
// buffer is [scales: 4 * blocks bytes][q: m bytes][padding to 4].
#include "comm/quantized_all_gather.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/round.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "comm/int8_blocks.h"
#include "comm/types.h"

namespace zerotrain::comm {
namespace {

struct PartLayout {
  int64_t numel = 0;  // m, the shard's elements
  int64_t block = 1;
  int64_t blocks = 0;
  int64_t bytes = 0;
};

PartLayout LayoutOf(int64_t shard_numel) {
  PartLayout p;
  p.numel = shard_numel;
  p.block = Int8BlockSize(shard_numel);
  p.blocks = Int8BlockCount(shard_numel, p.block);
  p.bytes = (4 * p.blocks + shard_numel + 3) / 4 * 4;
  return p;
}

// Views into one rank's part of a byte buffer.
at::Tensor Scales(const at::Tensor& part, const PartLayout& l) {
  return part.narrow(0, 0, 4 * l.blocks).view(at::kFloat);
}
at::Tensor Codes(const at::Tensor& part, const PartLayout& l) {
  return part.narrow(0, 4 * l.blocks, l.numel).view(at::kChar);
}

// The kernels' arithmetic in ATen operations, for tensors on a device: the same scale, the same
// multiply and round to nearest even, NaN scales for blocks that are not finite.
void QuantizeOnDevice(const at::Tensor& x, const PartLayout& l, at::Tensor part) {
  const int64_t padded = l.blocks * l.block;
  at::Tensor v = at::zeros({padded}, x.options().dtype(at::kFloat));
  v.narrow(0, 0, l.numel).copy_(x);
  v = v.view({l.blocks, l.block});
  const at::Tensor absmax = std::get<0>(v.abs().max(1, /*keepdim=*/true));
  const at::Tensor finite = absmax.isfinite();
  const at::Tensor nan = at::full({}, std::numeric_limits<float>::quiet_NaN(), absmax.options());
  Scales(part, l).copy_(at::where(finite, absmax.div(127.0f), nan).view({-1}));
  const at::Tensor inv = at::where(finite.logical_and(absmax.gt(0)),
                                   at::full_like(absmax, 127.0f).div(absmax), nan.mul(0));
  const at::Tensor q = at::round(v.mul(inv)).clamp(-127, 127).mul(finite).to(at::kChar);
  Codes(part, l).copy_(q.view({-1}).narrow(0, 0, l.numel));
}

void DequantizeOnDevice(const at::Tensor& part, const PartLayout& l, int64_t valid,
                        at::Tensor out) {
  const int64_t padded = l.blocks * l.block;
  at::Tensor q = at::zeros({padded}, part.options().dtype(at::kFloat));
  q.narrow(0, 0, l.numel).copy_(Codes(part, l));
  const at::Tensor v = q.view({l.blocks, l.block}).mul(Scales(part, l).view({l.blocks, 1}));
  out.copy_(v.view({-1}).narrow(0, 0, valid));
}

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

namespace internal {
void QuantizePartWithAtenOps(const at::Tensor& x, at::Tensor part) {
  QuantizeOnDevice(x, LayoutOf(x.numel()), std::move(part));
}
void DequantizePartWithAtenOps(const at::Tensor& part, int64_t shard_numel, at::Tensor out) {
  const int64_t valid = out.numel();
  DequantizeOnDevice(part, LayoutOf(shard_numel), valid, std::move(out));
}
}  // namespace internal

int64_t QuantizedShardBytes(int64_t shard_numel) { return LayoutOf(shard_numel).bytes; }

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
  const PartLayout l = LayoutOf(shard.numel());
  const bool on_cpu = output.device().is_cpu();
  at::Tensor gathered = at::empty({world * l.bytes}, output.options().dtype(at::kByte));
  at::Tensor mine = gathered.narrow(0, group.rank() * l.bytes, l.bytes);
  try {
    if (on_cpu) {
      absl::Status q = QuantizeInt8(shard.data_ptr(), shard.scalar_type(), l.numel, l.block,
                                    Codes(mine, l).data_ptr<int8_t>(),
                                    Scales(mine, l).data_ptr<float>(), options.simd);
      if (!q.ok()) return fail(q);
    } else {
      QuantizeOnDevice(shard, l, mine);
    }
  } catch (const c10::Error& e) {
    return fail(absl::InternalError(
        absl::StrCat("quantized all_gather: quantizing: ", e.what_without_backtrace())));
  }
  Work transfer = group.AllGatherAsync(mine, gathered);
  auto dequantize = [gathered, output, l, world, on_cpu, simd = options.simd]() -> absl::Status {
    const int64_t n = output.numel();
    try {
      for (int r = 0; r < world; ++r) {
        const ShardRange range = ShardOf(n, world, r);
        if (range.size() == 0) continue;
        at::Tensor part = gathered.narrow(0, r * l.bytes, l.bytes);
        at::Tensor out = output.narrow(0, range.begin, range.size());
        if (!on_cpu) {
          DequantizeOnDevice(part, l, range.size(), out);
          continue;
        }
        absl::Status s =
            DequantizeInt8(Codes(part, l).data_ptr<int8_t>(), Scales(part, l).data_ptr<float>(),
                           range.size(), l.block, out.data_ptr(), out.scalar_type(), simd);
        if (!s.ok()) return s;
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("quantized all_gather: dequantizing: ", e.what_without_backtrace()));
    }
    return absl::OkStatus();
  };
  return Work(transfer.op(), {[transfer]() mutable { return transfer.Wait(); }, dequantize},
              {[transfer]() mutable { return transfer.WaitOnStream(); }, dequantize}, nullptr);
}

absl::Status QuantizedAllGather(ProcessGroup& group, at::Tensor shard, at::Tensor output,
                                const QuantizedGatherOptions& options) {
  return QuantizedAllGatherAsync(group, std::move(shard), std::move(output), options).Wait();
}

}  // namespace zerotrain::comm
