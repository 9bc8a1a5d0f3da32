// Starting N ranks of the current program on this machine: each a copy of the binary with the
// torchrun variables set (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT) and,
// as torchrun does, OMP_NUM_THREADS=1 unless the caller set it. Used by the benchmarks; a rank
// calls DieWithLauncher() first so that killing the launcher ends every rank.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zerotrain::comm {

// Runs `world_size` copies of /proc/self/exe with `args` and waits for all of them. Returns OK
// when every rank exits 0; otherwise an error naming the first rank that failed and how.
absl::Status RunLocalRanks(int world_size, int master_port, const std::vector<std::string>& args);

// True in a process started by RunLocalRanks.
bool LaunchedAsLocalRank();

// In a process started by RunLocalRanks: asks the kernel to kill it when the launcher dies.
void DieWithLauncher();

}  // namespace zerotrain::comm
