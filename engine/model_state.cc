// Model-state byte accounting and the ZeRO formulas (see model_state.h).
#include "engine/model_state.h"

#include "absl/strings/str_cat.h"

namespace zerotrain::engine {

std::string ModelStateBytes::ToString() const {
  return absl::StrCat(
      "params ", params, " B, grads ", grads, " B, master ", master, " B, optimizer states ",
      optimizer_states, " B",
      secondary_params > 0 ? absl::StrCat(", hpZ secondary ", secondary_params, " B") : "",
      ", total ", total(), " B (+ buffers ", buffers, " B)",
      offloaded_host + offloaded_nvme > 0
          ? absl::StrCat("; offloaded: host ", offloaded_host, " B, nvme ", offloaded_nvme, " B")
          : "");
}

double ZeroFormulaBytes(int stage, bool mixed_precision, int64_t psi, int world, MasterBytes k,
                        int hpz) {
  const double p = static_cast<double>(psi);
  const double n = static_cast<double>(world);
  const double big_k = k.master + k.states;  // the paper's K: 12 with fp32 master and moments
  if (stage == 3) {
    // Everything sharded, in either precision; a bf16 master is the bf16 parameter shard.
    const double secondary = hpz > 1 ? (mixed_precision ? 2 : 4) * p / hpz : 0;
    return (mixed_precision && k.master == 2 && k.master_is_shard ? 4 + k.states : 4 + big_k) * p /
               n +
           secondary;
  }
  if (mixed_precision) {
    switch (stage) {
      case 0:
        return (4 + big_k) * p;
      case 1:
        return 4 * p + big_k * p / n;
      default:
        return 2 * p + (2 + big_k) * p / n;
    }
  }
  switch (stage) {
    case 0:
      return 16 * p;
    case 1:
      return 8 * p + 12 * p / n;
    default:
      return 4 * p + 16 * p / n;
  }
}

}  // namespace zerotrain::engine
