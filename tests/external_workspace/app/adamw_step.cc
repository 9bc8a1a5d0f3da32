// One AdamW step with zerotrain's optim/ alone, checked against the formula written out by hand:
// proof that optim/ is usable from another repository without the rest of zerotrain.
#include <cmath>
#include <cstdio>
#include <vector>

#include "optim/optim.h"

int main() {
  namespace optim = zerotrain::optim;
  const int n = 1000;
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (int i = 0; i < n; ++i) {
    p[i] = 0.01f * (i % 17) - 0.05f;
    g[i] = 0.003f * (i % 11) - 0.01f;
  }
  const std::vector<float> p0 = p;
  optim::AdamOptions o;
  o.adamw = true;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  optim::AdamShard shard;
  shard.size = n;
  shard.params = p.data();
  shard.grads = g.data();
  shard.grad_dtype = optim::DType::kFloat32;
  shard.exp_avg = m.data();
  shard.exp_avg_sq = v.data();
  absl::Status s = optim::FusedAdamStep(o, /*step=*/1, shard);
  if (!s.ok()) {
    std::fprintf(stderr, "adamw_step: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  double worst = 0;  // largest error in units of the tolerance 1e-7 + 1e-5 * |want|
  for (int i = 0; i < n; ++i) {
    // Step 1 with bias correction: m_hat = g, v_hat = g^2.
    const double decayed = p0[i] * (1 - o.lr * o.weight_decay);
    const double want = decayed - o.lr * g[i] / (std::fabs(g[i]) + o.eps);
    worst = std::fmax(worst, std::fabs(want - p[i]) / (1e-7 + 1e-5 * std::fabs(want)));
  }
  const bool ok = worst <= 1.0;
  std::printf("adamw_step: worst error %.3f of the tolerance: %s\n", worst, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
