// The scalar path of the INT8 block kernels: int8_blocks_body.h over one-lane "vectors", and the
// dispatch that picks a path and splits the blocks across threads.
#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "comm/int8_blocks.h"
#include "comm/int8_blocks_body.h"

namespace zerotrain::comm {
namespace internal {
namespace {

struct ScalarVec {
  static constexpr int kWidth = 1;
  float v;
  static ScalarVec Load(const float* p) { return {*p}; }
  static ScalarVec LoadBf16(const uint16_t* p) { return {ScalarLoad(p, Elem::kBf16, 0)}; }
  static ScalarVec LoadHalf(const uint16_t* p) { return {ScalarLoad(p, Elem::kF16, 0)}; }
  static uint32_t ZeroBits() { return 0; }
  static uint32_t MaxAbsBits(uint32_t acc, ScalarVec x) { return std::max(acc, AbsBits(x.v)); }
  static uint32_t ReduceMaxBits(uint32_t acc) { return acc; }
  static void StoreQ(ScalarVec x, float inv, int8_t* q) { *q = ScalarQ(x.v, inv); }
  static ScalarVec LoadQ(const int8_t* q, float scale) { return {static_cast<float>(*q) * scale}; }
  void Store(float* p) const { *p = v; }
  void StoreBf16(uint16_t* p) const { ScalarStore(p, Elem::kBf16, 0, v); }
  void StoreHalf(uint16_t* p) const { ScalarStore(p, Elem::kF16, 0, v); }
};

}  // namespace

const Int8Kernels& ScalarInt8Kernels() {
  static const Int8Kernels kernels = MakeInt8Kernels<ScalarVec>();
  return kernels;
}

}  // namespace internal

namespace {

absl::StatusOr<internal::Elem> ElemOf(at::ScalarType dtype, const char* op) {
  switch (dtype) {
    case at::kFloat:
      return internal::Elem::kF32;
    case at::kBFloat16:
      return internal::Elem::kBf16;
    case at::kHalf:
      return internal::Elem::kF16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": dtype ", c10::toString(dtype), " is not float, bfloat16 or half"));
  }
}

absl::StatusOr<const internal::Int8Kernels*> KernelsFor(SimdPath requested) {
  absl::StatusOr<SimdPath> path = ResolveSimdPath(requested);
  if (!path.ok()) return path.status();
  switch (*path) {
    case SimdPath::kAvx512:
      return &internal::Avx512Int8Kernels();
    case SimdPath::kAvx2:
      return &internal::Avx2Int8Kernels();
    default:
      return &internal::ScalarInt8Kernels();
  }
}

// Blocks per task: enough work (about 64k elements) to be worth a thread.
int64_t Grain(int64_t block) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, block)); }

}  // namespace

int64_t Int8BlockSize(int64_t numel) {
  if (numel <= 0) return 1;
  const int64_t blocks = (numel + kInt8MaxBlock - 1) / kInt8MaxBlock;
  const int64_t size = (numel + blocks - 1) / blocks;
  return std::min(kInt8MaxBlock, (size + 7) / 8 * 8);
}

absl::Status QuantizeInt8(const void* x, at::ScalarType dtype, int64_t numel, int64_t block,
                          int8_t* q, float* scales, SimdPath path) {
  absl::StatusOr<internal::Elem> elem = ElemOf(dtype, "QuantizeInt8");
  if (!elem.ok()) return elem.status();
  absl::StatusOr<const internal::Int8Kernels*> k = KernelsFor(path);
  if (!k.ok()) return k.status();
  if (block <= 0) return absl::InvalidArgumentError(absl::StrCat("QuantizeInt8: block ", block));
  at::parallel_for(0, Int8BlockCount(numel, block), Grain(block), [&](int64_t a, int64_t b) {
    (*k)->quantize(x, *elem, numel, block, a, b, q, scales);
  });
  return absl::OkStatus();
}

absl::Status DequantizeInt8(const int8_t* q, const float* scales, int64_t numel, int64_t block,
                            void* out, at::ScalarType dtype, SimdPath path) {
  absl::StatusOr<internal::Elem> elem = ElemOf(dtype, "DequantizeInt8");
  if (!elem.ok()) return elem.status();
  absl::StatusOr<const internal::Int8Kernels*> k = KernelsFor(path);
  if (!k.ok()) return k.status();
  if (block <= 0) return absl::InvalidArgumentError(absl::StrCat("DequantizeInt8: block ", block));
  at::parallel_for(0, Int8BlockCount(numel, block), Grain(block), [&](int64_t a, int64_t b) {
    (*k)->dequantize(q, scales, numel, block, a, b, out, *elem);
  });
  return absl::OkStatus();
}

}  // namespace zerotrain::comm
