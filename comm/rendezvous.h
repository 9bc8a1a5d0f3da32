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
  // torchrun's agent already hosts the store at master_addr:master_port
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 included, connects as a client.
  bool store_hosted_by_launcher = false;
  // Put before every key this job writes to the store: torchrun's attempt
  // ("zt/attempt<TORCHELASTIC_RESTART_COUNT>/"), since its agent keeps one store across restarts
  // and a restarted group must never read a dead attempt's keys; "" otherwise.
  std::string store_prefix;
  // TORCHELASTIC_RESTART_COUNT: how many times torchrun restarted this job's ranks (0 otherwise).
  int restart_count = 0;
};

// Returns the variable's value or nullptr; tests pass a map instead of the process environment.
using EnvLookup = std::function<const char*(const char* name)>;

// The job's id: ZT_JOB_ID (our launcher sets one per job), else TORCHELASTIC_RUN_ID (torchrun's
// --rdzv_id), else SLURM_JOB_ID, with ".SLURM_STEP_ID" when set, else Open MPI's job id
// (OMPI_MCA_ess_base_jobid); "" when none is set.
std::string JobIdFromEnv(const EnvLookup& env);

// Reads, in order of precedence: RANK/WORLD_SIZE/LOCAL_RANK (torchrun and our launcher),
// OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. The store is at
// MASTER_ADDR/MASTER_PORT; under Slurm and Open MPI, either one that is unset is derived from
// their own variables (store_address.h). A missing, malformed or inconsistent variable is an
// InvalidArgument error that names it and its value. job_id is JobIdFromEnv's.
absl::StatusOr<RendezvousInfo> RendezvousFromEnv(const EnvLookup& env);
absl::StatusOr<RendezvousInfo> RendezvousFromEnv();

}  // namespace zerotrain::comm
