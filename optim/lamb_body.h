// LAMB's two passes over one chunk, written over the vector type V like kernels_body.h (which
// includes this file inside each ISA's target region). Pass 1 updates the moments and sums
// |p|^2 and |u|^2, u being the Adam direction (without bias correction, as DeepSpeed's FusedLamb)
// plus weight decay; pass 2 recomputes u from the moments and applies it with the step size and
// the tensor's trust ratio.
namespace zerotrain::optim::internal {
namespace {

// u = m / (sqrt(v + eps_in_sqrt) + eps) + weight_decay * p, DeepSpeed FusedLamb's direction
template <class V>
struct LambDirection {
  V eps_in_sqrt, eps, wd;
  explicit LambDirection(const LambScalars& a)
      : eps_in_sqrt(V::Set(a.eps_in_sqrt)), eps(V::Set(a.eps)), wd(V::Set(a.weight_decay)) {}
  inline V operator()(V p, V m, V v) const {
    return V::Fma(wd, p, m / (V::Sqrt(v + eps_in_sqrt) + eps));
  }
};

template <class V, DType G, Out O>
struct LambMomentsOp {
  V beta1, beta2, omb1, omb2, grad_mul;
  LambDirection<V> direction;
  mutable V param_sq = V::Set(0.0f), update_sq = V::Set(0.0f);

  explicit LambMomentsOp(const LambScalars& a)
      : beta1(V::Set(a.beta1)),
        beta2(V::Set(a.beta2)),
        omb1(V::Set(a.one_minus_beta1)),
        omb2(V::Set(a.one_minus_beta2)),
        grad_mul(V::Set(a.grad_mul)),
        direction(a) {}

  inline void operator()(const Streams& s, int64_t i) const {
    const V g = LoadGrad<V, G>(s.grad, i) * grad_mul;
    const V p = V::Load(s.param + i);
    const V m = V::Fma(beta1, V::Load(s.state[0] + i), omb1 * g);
    const V v = V::Fma(beta2, V::Load(s.state[1] + i), (omb2 * g) * g);
    m.Store(s.state[0] + i);
    v.Store(s.state[1] + i);
    const V u = direction(p, m, v);
    param_sq = V::Fma(p, p, param_sq);
    update_sq = V::Fma(u, u, update_sq);
  }
};

template <class V, DType G, Out O>
struct LambApplyOp {
  LambDirection<V> direction;
  V neg_step_trust;

  explicit LambApplyOp(const LambScalars& a)
      : direction(a), neg_step_trust(V::Set(a.neg_step_trust)) {}

  inline void operator()(const Streams& s, int64_t i) const {
    V p = V::Load(s.param + i);
    p = V::Fma(neg_step_trust, direction(p, V::Load(s.state[0] + i), V::Load(s.state[1] + i)), p);
    p.Store(s.param + i);
    StoreOut<V, O>(s.out, i, p);
  }
};

// The norms are summed per block of 128 vectors in fp32, blocks in double, as SumSquares does.
// Padding in the tail is zeros, which add nothing as long as eps > 0 (the front end checks).
template <class V>
SquaredNorms LambMomentsKernel(const LambScalars& a, const StreamTypes& types, const Streams& s,
                               int64_t begin, int64_t end) {
  SquaredNorms total;
  StreamTypes no_out = types;
  no_out.has_out = false;
  DispatchTypes(no_out, [&](auto g, auto) {
    constexpr DType G = decltype(g)::value;
    constexpr int64_t kBlock = 128 * V::kWidth;
    for (int64_t b = begin; b < end; b += kBlock) {
      const LambMomentsOp<V, G, Out::kNone> op(a);
      ForEachVector<V, G, Out::kNone>(op, s, b, end - b < kBlock ? end : b + kBlock);
      total.param += static_cast<double>(op.param_sq.ReduceAdd());
      total.update += static_cast<double>(op.update_sq.ReduceAdd());
    }
  });
  return total;
}

template <class V>
void LambApplyKernel(const LambScalars& a, const StreamTypes& types, const Streams& s,
                     int64_t begin, int64_t end) {
  StreamTypes fp32_grad = types;
  fp32_grad.grad = DType::kFloat32;  // not read; fixes the instantiation
  DispatchTypes(fp32_grad, [&](auto g, auto o) {
    constexpr DType G = decltype(g)::value;
    constexpr Out O = decltype(o)::value;
    ForEachVector<V, G, O>(LambApplyOp<V, G, O>(a), s, begin, end);
  });
}

}  // namespace
}  // namespace zerotrain::optim::internal
