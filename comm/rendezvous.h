// Where this process sits in a job, read from the environment that torchrun, mpirun (Open MPI)
// and Slurm set, so the same binary runs under any of them.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::comm {

struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string source;  // "torchrun", "openmpi" or "slurm": which variables were read
  // Which job this rank belongs to (JobIdFromEnv); "" when the launcher names none. Rank 0 leaves
  // it in the store, and a rank of another job that reaches the store is refused by name.
  std::string job_id;
};

// Returns the variable's value or nullptr; tests pass a map instead of the process environment.
using EnvLookup = std::function<const char*(const char* name)>;

// The job's id: ZT_JOB_ID (our launcher sets one per job), else TORCHELASTIC_RUN_ID (torchrun's
// --rdzv_id), else SLURM_JOB_ID, with ".SLURM_STEP_ID" when set; "" when none is set.
std::string JobIdFromEnv(const EnvLookup& env);

// Reads, in order of precedence: RANK/WORLD_SIZE/LOCAL_RANK (torchrun and our launcher),
// OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. The store's
// address always comes from MASTER_ADDR/MASTER_PORT. A missing, malformed or inconsistent
// variable is an InvalidArgument error that names it and its value. job_id is JobIdFromEnv's.
absl::StatusOr<RendezvousInfo> RendezvousFromEnv(const EnvLookup& env);
absl::StatusOr<RendezvousInfo> RendezvousFromEnv();

}  // namespace zerotrain::comm
