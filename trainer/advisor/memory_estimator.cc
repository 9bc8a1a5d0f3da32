// The formulas, per device and per host, in bytes, in DeepSpeed's accounting for mixed-precision
// Adam: 2-byte parameters and gradients on the device (4P, counted whole), and 16 bytes of fp32
// master weights, two moments and gradient partition per parameter (12 and 8 with bf16 master
// weights and bf16 optimizer states: ShardedStateBytes), divided over the ranks that shard them.
// The host term without offload is each local rank loading an fp32 copy of the weights (stage 3
// with zero_init: of the largest layer).
#include "trainer/advisor/memory_estimator.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace zerotrain::advisor {

const char* OffloadName(Offload offload) {
  switch (offload) {
    case Offload::kNone:
      return "none";
    case Offload::kOptimizer:
      return "optimizer->cpu";
    case Offload::kOptimizerAndParams:
      return "optimizer+params->cpu";
  }
  return "?";
}

absl::Status ValidateAdvisorInput(const AdvisorInput& in) {
  auto bad = [](const char* field, auto value, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", value, " (", want, ")"));
  };
  if (in.total_params <= 0) return bad("params", in.total_params, "must be > 0");
  if (in.largest_layer_params <= 0) {
    return bad("largest_layer_params", in.largest_layer_params, "must be > 0");
  }
  if (in.largest_layer_params > in.total_params) {
    return bad("largest_layer_params", in.largest_layer_params, "must be <= params");
  }
  if (in.gpus_per_node <= 0) return bad("gpus_per_node", in.gpus_per_node, "must be > 0");
  if (in.nodes <= 0) return bad("nodes", in.nodes, "must be > 0");
  if (!(in.device_memory_gib > 0) || !std::isfinite(in.device_memory_gib)) {
    return bad("device_memory_gib", in.device_memory_gib, "must be > 0");
  }
  if (!(in.host_memory_gib >= 0) || !std::isfinite(in.host_memory_gib)) {
    return bad("host_memory_gib", in.host_memory_gib, "must be >= 0; 0 means unknown");
  }
  if (!(in.activation_fraction >= 0 && in.activation_fraction < 1)) {
    return bad("activation_fraction", in.activation_fraction, "must be in [0, 1)");
  }
  if (!(in.additional_buffer_factor >= 1) || !std::isfinite(in.additional_buffer_factor)) {
    return bad("additional_buffer_factor", in.additional_buffer_factor, "must be >= 1");
  }
  const int64_t devices = static_cast<int64_t>(in.gpus_per_node) * in.nodes;
  if (in.zero_hpz_partition_size < 0 ||
      (in.zero_hpz_partition_size > 1 && devices % in.zero_hpz_partition_size != 0)) {
    return bad("zero_hpz_partition_size", in.zero_hpz_partition_size,
               "must be 0 or 1 (off), or divide the devices (gpus_per_node x nodes)");
  }
  if (in.bf16_optimizer_states && !in.bf16_master_weights) {
    return bad("bf16_optimizer_states", "true", "needs bf16_master_weights");
  }
  return absl::OkStatus();
}

int ShardedStateBytes(const AdvisorInput& in) {
  if (!in.bf16_master_weights) return 16;
  return in.bf16_optimizer_states ? 8 : 12;
}

StageEstimate EstimateOne(const AdvisorInput& in, int stage, Offload offload) {
  // Stage 0 keeps fp32 master weights and states whatever the bf16 flags (DeepSpeed refuses them).
  const double k = stage == 0 ? 16 : ShardedStateBytes(in);
  // At stage 3 without optimizer offload a bf16 master is the parameter shard itself.
  const double alias = stage == 3 && offload == Offload::kNone && in.bf16_master_weights ? 2 : 0;
  const double p = static_cast<double>(in.total_params);
  const double layer = static_cast<double>(in.largest_layer_params);
  const double per_node = static_cast<double>(in.gpus_per_node);
  const double gpus = per_node * static_cast<double>(in.nodes);
  const double buffer = in.additional_buffer_factor;
  // Host bytes when each local rank materializes fp32 weights (stages 0-2, no offload).
  const double host_fp32_weights = p * 4 * per_node * buffer;
  double device = 0, host = 0;
  if (stage <= 2 && offload == Offload::kNone) {
    host = host_fp32_weights;
    // DeepSpeed's zero2 estimate, which its stage_1_and_2 code applies to stage 1 as well; stage
    // 0 is the same count with nothing sharded.
    device = 4 * p + std::floor(k * p / (stage == 0 ? 1.0 : gpus));
  } else if (stage <= 2) {
    // Optimizer and fp32 gradient partitions on the host: DeepSpeed's cpu_offload case. Stage 1
    // keeps whole fp16 gradients on the device, so it adds 2P to DeepSpeed's 2P.
    device = stage == 1 ? 4 * p : 2 * p;
    host = p * std::max(4 * gpus, k) * buffer;
  } else {
    const double nodes_factor = 1.0 / static_cast<double>(in.nodes);
    const double layer_bytes = 4 * layer;  // the gathered largest layer, fp16 params + grads
    if (offload == Offload::kOptimizerAndParams) {
      device = layer_bytes;
      host = in.zero_init ? p * (2 + k) * nodes_factor * buffer
                          : p * std::max(4 * per_node, (2 + k) * nodes_factor) * buffer;
    } else if (offload == Offload::kOptimizer) {
      device = layer_bytes + std::floor(2 * p / gpus);
      host = in.zero_init ? p * k * nodes_factor * buffer
                          : p * std::max(4 * per_node, k * nodes_factor) * buffer;
    } else {
      device = layer_bytes + std::floor((2 + k - alias) * p / gpus);
      host = in.zero_init ? layer * 4 * per_node * buffer : host_fp32_weights;
    }
  }
  if (stage == 3 && in.zero_hpz_partition_size > 1) {
    device += std::floor(2 * p / in.zero_hpz_partition_size);  // hpZ's secondary copy
  }
  StageEstimate e;
  e.stage = stage;
  e.offload = offload;
  e.device_bytes = static_cast<int64_t>(device);
  e.host_bytes = static_cast<int64_t>(host);
  return e;
}

absl::StatusOr<std::vector<StageEstimate>> EstimateModelStates(const AdvisorInput& in) {
  if (auto s = ValidateAdvisorInput(in); !s.ok()) return s;
  const std::pair<int, Offload> order[] = {{0, Offload::kNone},
                                           {1, Offload::kNone},
                                           {2, Offload::kNone},
                                           {2, Offload::kOptimizer},
                                           {3, Offload::kNone},
                                           {3, Offload::kOptimizer},
                                           {3, Offload::kOptimizerAndParams},
                                           {1, Offload::kOptimizer}};
  const double usable_device = (1 - in.activation_fraction) * in.device_memory_gib * kGiB;
  std::vector<StageEstimate> out;
  for (const auto& [stage, offload] : order) {
    StageEstimate e = EstimateOne(in, stage, offload);
    e.fits_device = static_cast<double>(e.device_bytes) <= usable_device;
    e.fits_host =
        in.host_memory_gib == 0 || static_cast<double>(e.host_bytes) <= in.host_memory_gib * kGiB;
    out.push_back(e);
  }
  return out;
}

}  // namespace zerotrain::advisor
