// Newton-Schulz iterations written op for op as DeepSpeed 0.19.8 writes them
// (runtime/zero/muon/original_muon.py), so that each product and each rounding to the compute
// dtype happens where DeepSpeed's eager torch does it.
#include "optim/newton_schulz.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/matmul.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace zerotrain::optim {
namespace {

constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;

// torch.ops.mkldnn._is_mkldnn_fp16_supported(), which DeepSpeed's CPU accelerator asks.
bool CpuHasHalfGemm() {
  static const bool supported = [] {
    try {
      auto op = c10::Dispatcher::singleton()
                    .findSchemaOrThrow("mkldnn::_is_mkldnn_fp16_supported", "")
                    .typed<bool()>();
      return op.call();
    } catch (const c10::Error&) {
      return false;
    }
  }();
  return supported;
}

// Python's `c * A @ A` is `(c * A) @ A`, and X.norm(dim=(-2, -1)) is linalg.vector_norm: the same
// ops here, as each rounds to the compute dtype on its own.
at::Tensor Normalized(const at::Tensor& x) {
  return x / (at::linalg_vector_norm(x, 2, at::IntArrayRef{-2, -1}, /*keepdim=*/true) + 1e-7);
}

// The quintic iteration on x (rows <= cols).
at::Tensor Quintic(at::Tensor x, int steps) {
  for (int i = 0; i < steps; ++i) {
    const at::Tensor a = at::matmul(x, x.mT());
    const at::Tensor b = kB * a + at::matmul(kC * a, a);
    x = kA * x + at::matmul(b, x);
  }
  return x;
}

at::Tensor Standard(const at::Tensor& g, int steps) {
  const bool tall = g.size(-2) > g.size(-1);
  at::Tensor x = g.to(NsComputeDtype(NsMethod::kStandard, g.device()));
  if (tall) x = x.mT();
  x = Quintic(Normalized(x), steps);
  return tall ? x.mT() : x;
}

// The Gram form iterates on R = X X^T (rows x rows) and applies the accumulated polynomial Q to
// X at the end, restarting from X = Q X at iteration 2 to stay stable in fp16.
at::Tensor Gram(const at::Tensor& g, int steps) {
  const bool tall = g.size(-2) > g.size(-1);
  // Normalised before the cast, in a dtype with fp32's range (fp16 input goes through fp32).
  at::Tensor x = g.to(g.scalar_type() == at::kHalf ? at::kFloat : g.scalar_type());
  if (tall) x = x.mT();
  const int64_t n = x.size(-2), m = x.size(-1);
  x = Normalized(x).to(NsComputeDtype(NsMethod::kGram, g.device()));
  if (m <= n) {
    x = Quintic(x, steps);
    return tall ? x.mT() : x;
  }
  constexpr int kRestartAt = 2;
  at::Tensor r = at::matmul(x, x.mT());
  at::Tensor q;
  for (int i = 0; i < steps; ++i) {
    if (i == kRestartAt) {
      x = at::matmul(q, x);
      r = at::matmul(x, x.mT());
      q = at::Tensor();
    }
    const at::Tensor z = kB * r + at::matmul(kC * r, r);
    if (!q.defined()) {
      q = z.clone();
      q.diagonal(0, -2, -1).add_(kA);
    } else {
      q = kA * q + at::matmul(z, q);
    }
    if (i < steps - 1 && i + 1 != kRestartAt) {
      const at::Tensor rz = kA * r + at::matmul(z, r);
      r = kA * rz + at::matmul(z, rz);
    }
  }
  return tall ? at::matmul(x.mT(), q.mT()) : at::matmul(q, x);
}

}  // namespace

absl::StatusOr<NsMethod> ParseNsMethod(absl::string_view name) {
  if (name == "gram") return NsMethod::kGram;
  if (name == "standard") return NsMethod::kStandard;
  return absl::InvalidArgumentError(
      absl::StrCat("ns_method \"", name, "\": expected \"gram\" or \"standard\""));
}

const char* NsMethodName(NsMethod method) {
  return method == NsMethod::kGram ? "gram" : "standard";
}

at::ScalarType NsComputeDtype(NsMethod method, const c10::Device& device) {
  if (method == NsMethod::kStandard) return at::kBFloat16;
  return !device.is_cpu() || CpuHasHalfGemm() ? at::kHalf : at::kFloat;
}

at::Tensor Orthogonalize(const at::Tensor& g, NsMethod method, int steps) {
  return method == NsMethod::kGram ? Gram(g, steps) : Standard(g, steps);
}

at::Tensor MuonUpdate(const at::Tensor& u, NsMethod method, int steps) {
  at::Tensor o = Orthogonalize(u, method, steps);
  const int64_t rows = u.size(-2), cols = u.size(-1);
  o.mul_(rows > cols ? std::sqrt(static_cast<double>(rows) / static_cast<double>(cols)) : 1.0);
  return o.scalar_type() == u.scalar_type() ? o : o.to(u.scalar_type());
}

}  // namespace zerotrain::optim
