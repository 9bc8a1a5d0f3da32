// Rendezvous variables of torchrun, Open MPI and Slurm, validated once with errors that name them.
#include "comm/rendezvous.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/store_address.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

struct Scheme {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
};

constexpr Scheme kSchemes[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

absl::StatusOr<int> ReadInt(const EnvLookup& env, const char* name, int min, int max) {
  const char* text = env(name);
  if (text == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous: ", name, " is not set"));
  }
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous: ", name, "='", text, "' is not an integer in [", min, ", ", max, "]"));
  }
  return value;
}

// torchrun's agent store and restart count (RendezvousInfo's fields say why).
absl::Status ReadTorchElastic(const EnvLookup& env, RendezvousInfo& info) {
  if (env("TORCHELASTIC_RESTART_COUNT") != nullptr) {
    ZT_ASSIGN_OR_RETURN(info.restart_count, ReadInt(env, "TORCHELASTIC_RESTART_COUNT", 0, 1 << 20));
  }
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  info.store_hosted_by_launcher = agent != nullptr && std::string(agent) == "True";
  if (info.store_hosted_by_launcher) {
    info.store_prefix = absl::StrCat("zt/attempt", info.restart_count, "/");
  }
  return absl::OkStatus();
}

}  // namespace

std::string JobIdFromEnv(const EnvLookup& env) {
  for (const char* name : {"ZT_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* id = env(name);
    if (id != nullptr && *id != '\0') return id;
  }
  const char* slurm_job = env("SLURM_JOB_ID");
  if (slurm_job == nullptr || *slurm_job == '\0') {
    const char* mpi_job = env("OMPI_MCA_ess_base_jobid");
    return mpi_job != nullptr ? absl::StrCat("openmpi-", mpi_job) : "";
  }
  // Steps of one allocation are separate jobs (two sruns may run side by side).
  const char* step = env("SLURM_STEP_ID");
  return step != nullptr && *step != '\0' ? absl::StrCat(slurm_job, ".", step) : slurm_job;
}

absl::StatusOr<RendezvousInfo> RendezvousFromEnv(const EnvLookup& env) {
  const Scheme* scheme = nullptr;
  for (const Scheme& s : kSchemes) {
    if (env(s.rank) != nullptr || env(s.size) != nullptr) {
      scheme = &s;
      break;
    }
  }
  if (scheme == nullptr) {
    std::vector<std::string> names;
    for (const Scheme& s : kSchemes) names.push_back(absl::StrCat(s.rank, "/", s.size));
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: none of ", absl::StrJoin(names, ", "),
                     " is set; start ranks with torchrun, mpirun, srun or `--nproc_per_node`"));
  }
  RendezvousInfo info;
  info.source = scheme->source;
  ZT_ASSIGN_OR_RETURN(info.world_size, ReadInt(env, scheme->size, 1, 1 << 20));
  ZT_ASSIGN_OR_RETURN(info.rank, ReadInt(env, scheme->rank, 0, 1 << 20));
  if (info.rank >= info.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous: ", scheme->rank, "=", info.rank,
                                                   " is not below ", scheme->size, "=",
                                                   info.world_size));
  }
  info.local_rank = info.rank;
  if (env(scheme->local_rank) != nullptr) {
    ZT_ASSIGN_OR_RETURN(info.local_rank, ReadInt(env, scheme->local_rank, 0, info.world_size - 1));
  }
  const char* addr = env("MASTER_ADDR");
  if (addr != nullptr && *addr != '\0') {
    info.master_addr = addr;
  } else {
    ZT_ASSIGN_OR_RETURN(info.master_addr, DerivedStoreHost(info.source, env));
  }
  if (env("MASTER_PORT") != nullptr || info.source == "torchrun") {
    ZT_ASSIGN_OR_RETURN(info.master_port, ReadInt(env, "MASTER_PORT", 1, 65535));
  } else {
    ZT_ASSIGN_OR_RETURN(info.master_port, DerivedStorePort(info.source, env));
  }
  ZT_RETURN_IF_ERROR(ReadTorchElastic(env, info));
  info.job_id = JobIdFromEnv(env);
  return info;
}

absl::StatusOr<RendezvousInfo> RendezvousFromEnv() {
  return RendezvousFromEnv([](const char* name) { return std::getenv(name); });
}

}  // namespace zerotrain::comm
