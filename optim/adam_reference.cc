// The double-precision Adam/AdamW reference of adam_reference.h.
#include "optim/adam_reference.h"

#include <algorithm>
#include <cmath>

namespace zerotrain::optim::testing {

ReferenceAdam::ReferenceAdam(const std::vector<float>& init)
    : p(init.begin(), init.end()), m(init.size()), v(init.size()), vmax(init.size()) {}

void ReferenceAdam::Step(const AdamOptions& o, int64_t t, const std::vector<float>& grads) {
  const double bc1 = o.bias_correction ? 1.0 - std::pow(o.beta1, t) : 1.0;
  const double bc2 = o.bias_correction ? 1.0 - std::pow(o.beta2, t) : 1.0;
  for (size_t i = 0; i < p.size(); ++i) {
    double g = grads[i] / o.grad_scale;
    if (o.adamw) {
      p[i] *= 1.0 - o.lr * o.weight_decay;  // decoupled decay before the update
    } else {
      g += o.weight_decay * p[i];  // L2 folded into the gradient
    }
    m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g;
    v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g * g;
    vmax[i] = std::max(vmax[i], v[i]);
    const double second = o.amsgrad ? vmax[i] : v[i];
    p[i] -= o.lr / bc1 * m[i] / (std::sqrt(second) / std::sqrt(bc2) + o.eps);
  }
}

}  // namespace zerotrain::optim::testing
