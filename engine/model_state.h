// Model-state memory per rank: what the engine holds, by category, and the ZeRO paper's formula
// for the same configuration (Psi parameters, N ranks, Adam-style optimizer with two fp32 moments).
//   mixed precision (bf16/fp16 params and gradients, fp32 master + 2 moments, K = 12):
//     stage 0: 16 Psi        stage 1: 4 Psi + 12 Psi / N        stage 2: 2 Psi + 14 Psi / N
//   fp32 (the parameters are the master weights at stage 0; stages 1 and 2 keep a separate fp32
//   master shard, as DeepSpeed does):
//     stage 0: 16 Psi        stage 1: 8 Psi + 12 Psi / N        stage 2: 4 Psi + 16 Psi / N
//   stage 3, either precision: 16 Psi / N (fp32: the parameter shard is the master shard), plus
//   the persistent parameters every rank keeps whole and the gathered ones alive during a step.
// With bf16 master weights K = 2 + 8 = 10, and with bf16 optimizer states too K = 2 + 4 = 6; at
// stage 3 (no optimizer offload) the bf16 parameter shard is the master: (2 + 2 + 8) Psi / N and
// (2 + 2 + 4) Psi / N, as DeepSpeed, which keeps one bf16 copy there too.
#pragma once

#include <cstdint>
#include <string>

namespace zerotrain::engine {

struct ModelStateBytes {
  int64_t params = 0;            // the model's parameters (the flat buffer), model dtype
  int64_t grads = 0;             // persistent gradient storage
  int64_t master = 0;            // fp32 master weights not aliasing the parameters
  int64_t optimizer_states = 0;  // moments / momentum
  int64_t secondary_params = 0;  // ZeRO++ hpZ: the node-sharded copy, at its largest
  int64_t buffers = 0;           // non-trainable module buffers (not in the formula)
  // offload_optimizer cpu/nvme: the master weights and optimizer states are not with the model
  // (master and optimizer_states are 0) but here: host memory (cpu: all of them; nvme: the
  // buffer_count sub-group buffers) and swap-file bytes. Not in total(), which is the model's.
  int64_t offloaded_host = 0;
  int64_t offloaded_nvme = 0;
  int64_t total() const { return params + grads + master + optimizer_states + secondary_params; }
  std::string ToString() const;
};

// Bytes per element of the master weights and of Adam's two moments together.
struct MasterBytes {
  int master = 4;  // 2 with bf16 master weights
  int states = 8;  // 4 with bf16 optimizer states
  // Stage 3 with a bf16 master: the master is the parameter shard (no optimizer offload and the
  // shard on the model's device), not a copy beside it.
  bool master_is_shard = true;
};

// The formula above, in bytes, for `psi` elements (padded flat size), `world` ranks and Adam;
// with ZeRO++'s hpZ at stage 3 (hpz > 1) plus the secondary copy, 2 Psi / hpz (4 Psi / hpz in
// fp32). The engine keeps no secondary for persistent submodules, so it holds a little less.
double ZeroFormulaBytes(int stage, bool mixed_precision, int64_t psi, int world, MasterBytes k = {},
                        int hpz = 1);

}  // namespace zerotrain::engine
