// One buffer's INT8 wire form (see int8_parts.h).
#include "comm/int8_parts.h"

#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/round.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "comm/int8_blocks.h"

namespace zerotrain::comm {
namespace {

at::Tensor Scales(const at::Tensor& part, const Int8Part& l) {
  return part.narrow(0, 0, 4 * l.blocks).view(at::kFloat);
}
at::Tensor Codes(const at::Tensor& part, const Int8Part& l) {
  return part.narrow(0, 4 * l.blocks, l.numel).view(at::kChar);
}

}  // namespace

Int8Part Int8PartOf(int64_t numel) {
  Int8Part p;
  p.numel = numel;
  p.block = Int8BlockSize(numel);
  p.blocks = Int8BlockCount(numel, p.block);
  p.bytes = (4 * p.blocks + numel + 3) / 4 * 4;
  return p;
}

namespace internal {

// The kernels' arithmetic: the same scale, the same multiply and round to nearest even, NaN
// scales for blocks that are not finite.
void QuantizePartWithAtenOps(const at::Tensor& x, at::Tensor part) {
  const Int8Part l = Int8PartOf(x.numel());
  at::Tensor v = at::zeros({l.blocks * l.block}, x.options().dtype(at::kFloat));
  v.narrow(0, 0, l.numel).copy_(x.view({-1}));
  v = v.view({l.blocks, l.block});
  const at::Tensor absmax = std::get<0>(v.abs().max(1, /*keepdim=*/true));
  const at::Tensor finite = absmax.isfinite();
  const at::Tensor kept = finite.logical_and(absmax.ge(kInt8Tiny));  // the rest: NaN or zeros
  const at::Tensor nan = at::full({}, std::numeric_limits<float>::quiet_NaN(), absmax.options());
  const at::Tensor zero = at::zeros_like(absmax);
  Scales(part, l).copy_(
      at::where(finite, at::where(kept, absmax.div(127.0f), zero), nan).view({-1}));
  const at::Tensor inv = at::where(kept, at::full_like(absmax, 127.0f).div(absmax), zero);
  // Only kept blocks' values reach the cast: the others' products may be NaN.
  const at::Tensor q = at::where(kept, at::round(v.mul(inv)).clamp(-127, 127), zero).to(at::kChar);
  Codes(part, l).copy_(q.view({-1}).narrow(0, 0, l.numel));
}

void DequantizePartWithAtenOps(const at::Tensor& part, int64_t numel, at::Tensor out) {
  const Int8Part l = Int8PartOf(numel);
  at::Tensor q = at::zeros({l.blocks * l.block}, part.options().dtype(at::kFloat));
  q.narrow(0, 0, l.numel).copy_(Codes(part, l));
  const at::Tensor v = q.view({l.blocks, l.block}).mul(Scales(part, l).view({l.blocks, 1}));
  out.view({-1}).copy_(v.view({-1}).narrow(0, 0, out.numel()));
}

}  // namespace internal

absl::Status QuantizePart(const at::Tensor& x, at::Tensor part, SimdPath simd) {
  try {
    if (!x.device().is_cpu()) {
      internal::QuantizePartWithAtenOps(x, std::move(part));
      return absl::OkStatus();
    }
    const Int8Part l = Int8PartOf(x.numel());
    const at::Tensor c = x.contiguous();
    return QuantizeInt8(c.data_ptr(), c.scalar_type(), l.numel, l.block,
                        Codes(part, l).data_ptr<int8_t>(), Scales(part, l).data_ptr<float>(), simd);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("quantizing ", x.numel(), " elements to INT8: ", e.what_without_backtrace()));
  }
}

absl::Status DequantizePart(const at::Tensor& part, int64_t numel, at::Tensor out, SimdPath simd) {
  try {
    if (!out.device().is_cpu() || !out.is_contiguous()) {
      internal::DequantizePartWithAtenOps(part, numel, std::move(out));
      return absl::OkStatus();
    }
    const Int8Part l = Int8PartOf(numel);
    return DequantizeInt8(Codes(part, l).data_ptr<int8_t>(), Scales(part, l).data_ptr<float>(),
                          out.numel(), l.block, out.data_ptr(), out.scalar_type(), simd);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("dequantizing ", numel, " INT8 elements: ", e.what_without_backtrace()));
  }
}

}  // namespace zerotrain::comm
