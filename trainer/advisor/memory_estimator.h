// The model-state memory estimator: bytes per device and per host for ZeRO stages 0-3, with and
// without offload, from a parameter count and the cluster's shape, by DeepSpeed's
// estimate_zero2/zero3_model_states_mem_needs (its zero2 estimate covers stage 1 too; stage 0 is
// that estimate with nothing sharded). docs/ADVISOR.md has the table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::advisor {

struct AdvisorInput {
  int64_t total_params = 0;
  int64_t largest_layer_params = 0;  // the most parameters one module holds (stage 3 gathers it)
  int64_t gpus_per_node = 1;
  int64_t nodes = 1;
  double device_memory_gib = 0;  // per device
  double host_memory_gib = 0;    // per node; 0 = unknown, host fit is not checked
  // Share of device memory left for activations, temporary buffers and fragmentation: a
  // configuration "fits" when its model states take at most (1 - this) of the device.
  double activation_fraction = 0.25;
  // The run wants larger micro-batches than stage 0/1 leave room for: prefer stage 2.
  bool prefer_larger_batches = false;
  // DeepSpeed's additional_buffer_factor on host memory, and zero_init for stage 3.
  double additional_buffer_factor = 1.5;
  bool zero_init = true;
  // bf16.bf16_master_weights_and_grads / bf16_optimizer_states (stages 1-3): the 16 bytes per
  // parameter of master weights, moments and gradient partition become 12, then 8; at stage 3
  // without offload the bf16 parameter shard is the master, 2 bytes fewer again.
  bool bf16_master_weights = false;
  bool bf16_optimizer_states = false;
  // zero_hpz_partition_size (ZeRO++ hpZ, stage 3): each device also holds the 2-byte parameters
  // sharded over this many devices (its node), 2P / hpz bytes more. 0 and 1: off.
  int zero_hpz_partition_size = 1;
};

// Bytes per parameter of the sharded master weights, optimizer moments and gradient partition:
// 16 (fp32), 12 (bf16 master and gradients) or 8 (bf16 optimizer states too).
int ShardedStateBytes(const AdvisorInput& in);

// What is offloaded to CPU memory. Stage 0 supports none; stage 3 may offload parameters too.
enum class Offload { kNone, kOptimizer, kOptimizerAndParams };
const char* OffloadName(Offload offload);

struct StageEstimate {
  int stage = 0;
  Offload offload = Offload::kNone;
  int64_t device_bytes = 0;  // model states per device
  int64_t host_bytes = 0;    // per node
  bool fits_device = false;  // device_bytes <= (1 - activation_fraction) * device memory
  bool fits_host = false;    // true when host memory is unknown
  bool fits() const { return fits_device && fits_host; }
};

// Checks every field, naming the first bad one and its value.
absl::Status ValidateAdvisorInput(const AdvisorInput& in);

// All supported (stage, offload) pairs in the order of preference the advisor walks: faster
// first (stage 0, 1, 2, 2+offload, 3, 3+optimizer offload, 3+optimizer and parameter offload),
// then stage 1 + offload, which stage 2 + offload always beats but the table still shows.
absl::StatusOr<std::vector<StageEstimate>> EstimateModelStates(const AdvisorInput& in);

// One estimate's bytes, without the fit flags (the formulas, exposed for the tests).
StageEstimate EstimateOne(const AdvisorInput& in, int stage, Offload offload);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace zerotrain::advisor
