// Where rank 0's store is when MASTER_ADDR/MASTER_PORT are not set: Slurm and Open MPI say where
// their ranks run in variables of their own, and their users do not set torchrun's.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "comm/rendezvous.h"

namespace zerotrain::comm {

// The first host of a Slurm host list ("node[07-09,12],gpu3" -> "node07"), zero padding kept.
// InvalidArgument naming the list when it cannot be read.
absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist);

// The store's address for `source` ("slurm" or "openmpi") from that launcher's variables:
// on one node loopback, on several (Slurm) the step's first node, where task 0 runs. An error
// names the variable to set when the address cannot be derived (Open MPI across nodes).
absl::StatusOr<std::string> DerivedStoreHost(const std::string& source, const EnvLookup& env);

// A port every rank of the job derives alike from the launcher's job id (Slurm's job and step,
// Open MPI's job), in [15000, 32000): below Linux's ephemeral ports, so an outgoing connection
// never holds it. InvalidArgument naming MASTER_PORT when the launcher names no job.
absl::StatusOr<int> DerivedStorePort(const std::string& source, const EnvLookup& env);

}  // namespace zerotrain::comm
