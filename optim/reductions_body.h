// Second half of kernels_body.h (which includes it): the gradient reductions over one chunk,
// sum of squares and the inf/NaN check, and the table that collects every kernel of one ISA.
// Like kernels_body.h it is compiled once per ISA, inside that ISA's target region.
namespace zerotrain::optim::internal {
namespace {

// Each fp32 lane accumulates at most 128 squares before the block's sum is added up in double,
// so the error does not grow with the shard's length (and the scalar path is as accurate as the
// vector ones).
template <class V, DType G>
double SumSquaresTyped(const void* data, int64_t begin, int64_t end) {
  constexpr int W = V::kWidth;
  constexpr int64_t kBlock = 2 * 128 * W;
  double total = 0.0;
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = end - b < kBlock ? end : b + kBlock;
    V acc0 = V::Set(0.0f), acc1 = V::Set(0.0f);
    int64_t i = b;
    for (; i + 2 * W <= e; i += 2 * W) {
      const V x0 = LoadGrad<V, G>(data, i), x1 = LoadGrad<V, G>(data, i + W);
      acc0 = V::Fma(x0, x0, acc0);
      acc1 = V::Fma(x1, x1, acc1);
    }
    double partial = static_cast<double>((acc0 + acc1).ReduceAdd());
    for (; i < e; ++i) {
      const float x = LoadAsFloat(data, G, i);
      partial += static_cast<double>(x) * x;
    }
    total += partial;
  }
  return total;
}

// x * 0 is 0 for finite x and NaN for inf or NaN, so a running sum of x * 0 is NaN exactly when
// the block holds one; checking per block returns early on a hit.
template <class V, DType G>
bool HasInfOrNanTyped(const void* data, int64_t begin, int64_t end) {
  constexpr int W = V::kWidth;
  constexpr int64_t kBlock = 4096;
  const V zero = V::Set(0.0f);
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = end - b < kBlock ? end : b + kBlock;
    V acc = zero;
    int64_t i = b;
    for (; i + W <= e; i += W) acc = V::Fma(LoadGrad<V, G>(data, i), zero, acc);
    float flag = acc.ReduceAdd();
    for (; i < e; ++i) flag += LoadAsFloat(data, G, i) * 0.0f;
    if (flag != flag) return true;
  }
  return false;
}

template <class V>
double SumSquaresKernel(const void* data, DType dtype, int64_t begin, int64_t end) {
  switch (dtype) {
    case DType::kFloat32:
      return SumSquaresTyped<V, DType::kFloat32>(data, begin, end);
    case DType::kBFloat16:
      return SumSquaresTyped<V, DType::kBFloat16>(data, begin, end);
    case DType::kFloat16:
      return SumSquaresTyped<V, DType::kFloat16>(data, begin, end);
  }
  return 0.0;
}

template <class V>
bool HasInfOrNanKernel(const void* data, DType dtype, int64_t begin, int64_t end) {
  switch (dtype) {
    case DType::kFloat32:
      return HasInfOrNanTyped<V, DType::kFloat32>(data, begin, end);
    case DType::kBFloat16:
      return HasInfOrNanTyped<V, DType::kBFloat16>(data, begin, end);
    case DType::kFloat16:
      return HasInfOrNanTyped<V, DType::kFloat16>(data, begin, end);
  }
  return false;
}

template <class V>
KernelTable MakeKernelTable() {
  return KernelTable{&AdamKernel<V>,       &SgdKernel<V>,         &AdagradKernel<V>,
                     &SumSquaresKernel<V>, &HasInfOrNanKernel<V>, &LambMomentsKernel<V>,
                     &LambApplyKernel<V>};
}

}  // namespace
}  // namespace zerotrain::optim::internal
