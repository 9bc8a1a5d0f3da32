// Rank 0's store derived from Slurm's and Open MPI's own variables (see store_address.h).
#include "comm/store_address.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::comm {
namespace {

constexpr int kPortBase = 15000;
constexpr int kPortSpan = 17000;  // [15000, 32000): Linux's ephemeral ports start at 32768

const char* FirstSet(const EnvLookup& env, std::initializer_list<const char*> names,
                     const char** which) {
  for (const char* name : names) {
    const char* value = env(name);
    if (value != nullptr && *value != '\0') {
      *which = name;
      return value;
    }
  }
  return nullptr;
}

// A positive count from the first of `names` that is set; 0 when none is.
int64_t Count(const EnvLookup& env, std::initializer_list<const char*> names) {
  const char* which = nullptr;
  const char* text = FirstSet(env, names, &which);
  int64_t value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) && value > 0 ? value : 0;
}

}  // namespace

absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist) {
  const auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: Slurm node list \"", nodelist, "\": ", why));
  };
  std::string host;
  for (size_t i = 0; i < nodelist.size();) {
    const char c = nodelist[i];
    if (c == ',') break;  // a top-level comma ends the first entry
    if (c != '[') {
      host += c;
      ++i;
      continue;
    }
    // "[07-09,12]": the range list's first value, as written (its zero padding is the name's).
    const size_t close = nodelist.find(']', i);
    if (close == std::string::npos) return bad("a '[' without its ']'");
    std::string first = nodelist.substr(i + 1, close - i - 1);
    first = first.substr(0, first.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) {
      return bad("a range that does not start with a number");
    }
    host += first;
    i = close + 1;
  }
  if (host.empty()) return bad("no host in it");
  return host;
}

absl::StatusOr<std::string> DerivedStoreHost(const std::string& source, const EnvLookup& env) {
  if (source == "slurm") {
    if (Count(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"}) == 1) {
      return std::string("127.0.0.1");
    }
    const char* which = nullptr;
    const char* list =
        FirstSet(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &which);
    if (list == nullptr) {
      return absl::InvalidArgumentError(
          "rendezvous: MASTER_ADDR is not set and no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST "
          "says where task 0 runs; set MASTER_ADDR to rank 0's host");
    }
    return FirstSlurmHost(list);
  }
  if (source == "openmpi") {
    const int64_t nodes = Count(env, {"OMPI_MCA_orte_num_nodes"});
    const int64_t local = Count(env, {"OMPI_COMM_WORLD_LOCAL_SIZE"});
    const int64_t world = Count(env, {"OMPI_COMM_WORLD_SIZE"});
    if (nodes == 1 || (nodes == 0 && local > 0 && local == world)) {
      return std::string("127.0.0.1");
    }
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: MASTER_ADDR is not set and this Open MPI job spans ",
                     nodes > 0 ? absl::StrCat(nodes, " nodes") : std::string("more than one node"),
                     " (OMPI_COMM_WORLD_LOCAL_SIZE=", local, " of OMPI_COMM_WORLD_SIZE=", world,
                     "): set it to rank 0's host for every rank (mpirun -x MASTER_ADDR=HOST)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("rendezvous: MASTER_ADDR is not set (", source,
                   " variables were found; MASTER_ADDR/MASTER_PORT name rank 0's store)"));
}

absl::StatusOr<int> DerivedStorePort(const std::string& source, const EnvLookup& env) {
  uint64_t job = 0, step = 0;
  const char* which = nullptr;
  const char* id = nullptr;
  if (source == "slurm") {
    id = FirstSet(env, {"SLURM_JOB_ID", "SLURM_JOBID"}, &which);
    const char* step_text = env("SLURM_STEP_ID");
    // Two steps of one allocation may run side by side; the batch step's id is not a number.
    if (step_text != nullptr && !absl::SimpleAtoi(step_text, &step)) step = 0;
  } else if (source == "openmpi") {
    id = FirstSet(env, {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}, &which);
  }
  if (id == nullptr || !absl::SimpleAtoi(id, &job)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous: MASTER_PORT is not set and ", source,
        id == nullptr ? " names no job id to derive one from"
                      : absl::StrCat("'s job id ", which, "='", id, "' is not a number"),
        "; set MASTER_PORT to a free port, the same on every rank"));
  }
  return kPortBase + static_cast<int>((job * 31 + step) % kPortSpan);
}

}  // namespace zerotrain::comm
