// The optimizer and reduction kernels, written once over a vector type `V` (see the Vec structs
// in kernels_{scalar,avx2,avx512}.cc). Each ISA file defines its Vec, switches on its target and
// includes this file. Everything here has internal linkage: each ISA gets a private copy, so the
// linker can never hand the scalar path a copy compiled for AVX-512.
//
// V provides: kWidth, Set, Load, LoadBf16, LoadHalf, Store, StoreBf16, StoreHalf, + - * /,
// Fma(a, b, c) = a * b + c, Sqrt, Max, ReduceAdd (float or double).
#include <cstdint>
#include <cstring>

#include "optim/kernels.h"
#include "optim/precision.h"

namespace zerotrain::optim::internal {
namespace {

enum class Out { kNone, kF32, kBf16, kF16 };

template <DType G>
struct GradTag {
  static constexpr DType value = G;
};
template <Out O>
struct OutTag {
  static constexpr Out value = O;
};

template <class V, DType G>
inline V LoadGrad(const void* grad, int64_t i) {
  if constexpr (G == DType::kFloat32) return V::Load(static_cast<const float*>(grad) + i);
  if constexpr (G == DType::kBFloat16) return V::LoadBf16(static_cast<const uint16_t*>(grad) + i);
  if constexpr (G == DType::kFloat16) return V::LoadHalf(static_cast<const uint16_t*>(grad) + i);
}

template <class V, Out O>
inline void StoreOut(void* out, int64_t i, V x) {
  if constexpr (O == Out::kF32) x.Store(static_cast<float*>(out) + i);
  if constexpr (O == Out::kBf16) x.StoreBf16(static_cast<uint16_t*>(out) + i);
  if constexpr (O == Out::kF16) x.StoreHalf(static_cast<uint16_t*>(out) + i);
}

template <Out O>
constexpr int OutSize() {
  return O == Out::kF32 ? 4 : (O == Out::kNone ? 0 : 2);
}

// Runs op on every full vector of [begin, end), then once more on a zero-padded copy of the
// remainder, so lengths and start addresses need no particular alignment.
template <class V, DType G, Out O, class Op>
void ForEachVector(const Op& op, const Streams& s, int64_t begin, int64_t end) {
  constexpr int W = V::kWidth;
  int64_t i = begin;
  for (; i + W <= end; i += W) op(s, i);
  if (i == end) return;
  const int64_t n = end - i;
  constexpr int kGradSize = G == DType::kFloat32 ? 4 : 2;
  alignas(64) float param[W] = {};
  alignas(64) float state[3][W] = {};
  alignas(64) unsigned char grad[W * 4] = {};
  alignas(64) unsigned char out[W * 4] = {};
  Streams t;
  t.param = param;
  t.grad = grad;
  t.out = s.out ? out : nullptr;
  std::memcpy(param, s.param + i, n * sizeof(float));
  if (s.grad != nullptr) {  // LAMB's apply pass reads no gradient
    std::memcpy(grad, static_cast<const unsigned char*>(s.grad) + i * kGradSize, n * kGradSize);
  }
  for (int k = 0; k < 3; ++k) {
    if (s.state[k] == nullptr) continue;
    t.state[k] = state[k];
    std::memcpy(state[k], s.state[k] + i, n * sizeof(float));
  }
  op(t, 0);
  std::memcpy(s.param + i, param, n * sizeof(float));
  for (int k = 0; k < 3; ++k) {
    if (s.state[k] != nullptr) std::memcpy(s.state[k] + i, state[k], n * sizeof(float));
  }
  if (s.out) {
    std::memcpy(static_cast<unsigned char*>(s.out) + i * OutSize<O>(), out, n * OutSize<O>());
  }
}

// Calls f(GradTag<G>{}, OutTag<O>{}) for the run-time types, so each combination is compiled
// as its own loop with no per-element type switch.
template <DType G, class F>
inline void DispatchOut(const StreamTypes& types, F& f) {
  if (!types.has_out) return f(GradTag<G>{}, OutTag<Out::kNone>{});
  switch (types.out) {
    case DType::kFloat32:
      return f(GradTag<G>{}, OutTag<Out::kF32>{});
    case DType::kBFloat16:
      return f(GradTag<G>{}, OutTag<Out::kBf16>{});
    case DType::kFloat16:
      return f(GradTag<G>{}, OutTag<Out::kF16>{});
  }
}

template <class F>
inline void DispatchTypes(const StreamTypes& types, F&& f) {
  switch (types.grad) {
    case DType::kFloat32:
      return DispatchOut<DType::kFloat32>(types, f);
    case DType::kBFloat16:
      return DispatchOut<DType::kBFloat16>(types, f);
    case DType::kFloat16:
      return DispatchOut<DType::kFloat16>(types, f);
  }
}

// One fused pass: read param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq) once, write them
// (and the low-precision copy) once.
template <class V, DType G, Out O, bool kAmsgrad>
struct AdamOp {
  V beta1, beta2, omb1, omb2, eps, neg_step, inv_sqrt_bias2, decay, l2, grad_mul;
  bool has_l2;

  explicit AdamOp(const AdamScalars& a)
      : beta1(V::Set(a.beta1)),
        beta2(V::Set(a.beta2)),
        omb1(V::Set(a.one_minus_beta1)),
        omb2(V::Set(a.one_minus_beta2)),
        eps(V::Set(a.eps)),
        neg_step(V::Set(-a.step_size)),
        inv_sqrt_bias2(V::Set(a.inv_sqrt_bias2)),
        decay(V::Set(a.param_decay)),
        l2(V::Set(a.l2)),
        grad_mul(V::Set(a.grad_mul)),
        has_l2(a.l2 != 0.0f) {}

  inline void operator()(const Streams& s, int64_t i) const {
    V g = LoadGrad<V, G>(s.grad, i) * grad_mul;
    V p = V::Load(s.param + i);
    if (has_l2) g = V::Fma(l2, p, g);
    const V m = V::Fma(beta1, V::Load(s.state[0] + i), omb1 * g);
    const V v = V::Fma(beta2, V::Load(s.state[1] + i), (omb2 * g) * g);
    m.Store(s.state[0] + i);
    v.Store(s.state[1] + i);
    V second = v;
    if constexpr (kAmsgrad) {
      second = V::Max(V::Load(s.state[2] + i), v);
      second.Store(s.state[2] + i);
    }
    const V denom = V::Fma(V::Sqrt(second), inv_sqrt_bias2, eps);
    p = V::Fma(neg_step, m / denom, p * decay);
    p.Store(s.param + i);
    StoreOut<V, O>(s.out, i, p);
  }
};

template <class V, DType G, Out O>
struct SgdOp {
  V neg_lr, momentum, omd, wd, grad_mul;
  SgdScalars k;

  explicit SgdOp(const SgdScalars& a)
      : neg_lr(V::Set(-a.lr)),
        momentum(V::Set(a.momentum)),
        omd(V::Set(a.one_minus_dampening)),
        wd(V::Set(a.weight_decay)),
        grad_mul(V::Set(a.grad_mul)),
        k(a) {}

  inline void operator()(const Streams& s, int64_t i) const {
    V g = LoadGrad<V, G>(s.grad, i) * grad_mul;
    V p = V::Load(s.param + i);
    if (k.weight_decay != 0.0f) g = V::Fma(wd, p, g);
    if (k.use_momentum) {
      const V buf = k.first_step ? g : V::Fma(momentum, V::Load(s.state[0] + i), omd * g);
      buf.Store(s.state[0] + i);
      g = k.nesterov ? V::Fma(momentum, buf, g) : buf;
    }
    p = V::Fma(neg_lr, g, p);
    p.Store(s.param + i);
    StoreOut<V, O>(s.out, i, p);
  }
};

template <class V, DType G, Out O>
struct AdagradOp {
  V neg_clr, eps, wd, grad_mul;
  bool has_wd;

  explicit AdagradOp(const AdagradScalars& a)
      : neg_clr(V::Set(-a.clr)),
        eps(V::Set(a.eps)),
        wd(V::Set(a.weight_decay)),
        grad_mul(V::Set(a.grad_mul)),
        has_wd(a.weight_decay != 0.0f) {}

  inline void operator()(const Streams& s, int64_t i) const {
    V g = LoadGrad<V, G>(s.grad, i) * grad_mul;
    V p = V::Load(s.param + i);
    if (has_wd) g = V::Fma(wd, p, g);
    const V sum = V::Fma(g, g, V::Load(s.state[0] + i));
    sum.Store(s.state[0] + i);
    p = V::Fma(neg_clr, g / (V::Sqrt(sum) + eps), p);
    p.Store(s.param + i);
    StoreOut<V, O>(s.out, i, p);
  }
};

template <class V>
void AdamKernel(const AdamScalars& a, const StreamTypes& types, const Streams& s, int64_t begin,
                int64_t end) {
  DispatchTypes(types, [&](auto g, auto o) {
    constexpr DType G = decltype(g)::value;
    constexpr Out O = decltype(o)::value;
    if (a.amsgrad) {
      ForEachVector<V, G, O>(AdamOp<V, G, O, true>(a), s, begin, end);
    } else {
      ForEachVector<V, G, O>(AdamOp<V, G, O, false>(a), s, begin, end);
    }
  });
}

template <class V>
void SgdKernel(const SgdScalars& a, const StreamTypes& types, const Streams& s, int64_t begin,
               int64_t end) {
  DispatchTypes(types, [&](auto g, auto o) {
    constexpr DType G = decltype(g)::value;
    constexpr Out O = decltype(o)::value;
    ForEachVector<V, G, O>(SgdOp<V, G, O>(a), s, begin, end);
  });
}

template <class V>
void AdagradKernel(const AdagradScalars& a, const StreamTypes& types, const Streams& s,
                   int64_t begin, int64_t end) {
  DispatchTypes(types, [&](auto g, auto o) {
    constexpr DType G = decltype(g)::value;
    constexpr Out O = decltype(o)::value;
    ForEachVector<V, G, O>(AdagradOp<V, G, O>(a), s, begin, end);
  });
}

}  // namespace
}  // namespace zerotrain::optim::internal

// LAMB's two passes, then the reductions and MakeKernelTable, in the same anonymous namespace and
// target region.
#include "optim/lamb_body.h"
#include "optim/reductions_body.h"
