// The double-precision FusedLamb reference of lamb_reference.h.
#include "optim/lamb_reference.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace zerotrain::optim::testing {

ReferenceLamb::ReferenceLamb(const std::vector<float>& init, std::vector<int64_t> tensor_sizes)
    : p(init.begin(), init.end()),
      m(init.size()),
      v(init.size()),
      tensor_sizes_(std::move(tensor_sizes)) {}

void ReferenceLamb::Step(const LambOptions& o, int64_t t, const std::vector<float>& grads) {
  // The bias corrections go into the step size; the direction and its norm are without them.
  double step_size = o.lr;
  if (o.bias_correction) {
    step_size *= std::sqrt(1.0 - std::pow(o.beta2, t)) / (1.0 - std::pow(o.beta1, t));
  }
  int64_t off = 0;
  for (int64_t size : tensor_sizes_) {
    std::vector<double> u(size);
    double pn = 0, un = 0;
    for (int64_t i = off; i < off + size; ++i) {
      const double g = grads[i] / o.grad_scale;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      const double denom = o.eps_inside_sqrt ? std::sqrt(v[i] + o.eps) : std::sqrt(v[i]) + o.eps;
      u[i - off] = m[i] / denom + o.weight_decay * p[i];
      pn += p[i] * p[i];
      un += u[i - off] * u[i - off];
    }
    double trust = 1.0;  // FusedLamb's coefficient when either norm is 0
    if (pn > 0 && un > 0) {
      trust = std::min(o.max_coeff, std::max(o.min_coeff, std::sqrt(pn / un)));
    }
    for (int64_t i = off; i < off + size; ++i) p[i] -= step_size * trust * u[i - off];
    off += size;
  }
}

}  // namespace zerotrain::optim::testing
