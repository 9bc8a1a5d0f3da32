// The store a job's ranks meet at: one TCP store per address in a process, hosted by rank 0 (or,
// under torchrun, by its agent, the keys then under a prefix per restart attempt), where rank 0
// leaves the job's id and every rank marks its arrival. Groups made later reuse it under a new
// prefix of their own.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <utility>

#include "absl/status/statusor.h"
#include "comm/rendezvous.h"

namespace zerotrain::comm {

// The job's store and this group's index in it (0 for the first group a process makes). Errors,
// each one line: rank 0's port in use (at once), the store not reached within `timeout`, a rank
// of another job, ranks that did not arrive within `timeout` (named).
absl::StatusOr<std::pair<c10::intrusive_ptr<c10d::Store>, int>> JobStore(
    const RendezvousInfo& info, std::chrono::milliseconds timeout);

}  // namespace zerotrain::comm
