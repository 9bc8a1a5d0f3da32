// The job's TCP store (see store_rendezvous.h): hosted by rank 0 or found at torchrun's agent,
// checked for the job's id, and every rank's arrival awaited in it.
#include "comm/store_rendezvous.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/backend.h"
#include "comm/tcp_port.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

// One TCP store per address in a process; groups made later reuse it under a new prefix (each
// rank creates its groups in the same order, so the k-th group has the same prefix everywhere).
struct SharedStore {
  c10::intrusive_ptr<c10d::Store> store;
  int groups = 0;
};

// The line for a store that cannot be hosted because its port is taken: at once, without the
// timeout (nothing was waited for), saying how to choose another port.
absl::Status PortInUse(const RendezvousInfo& info, const std::string& where) {
  return absl::FailedPreconditionError(absl::StrCat(
      "rendezvous: rank 0 cannot host the store at ", where, ": port ", info.master_port,
      " is in use (another job?); pass --master_port=PORT to the launcher (or MASTER_PORT=PORT) "
      "to choose a free one"));
}

// Rank 0 leaves its job id in the store; the others compare theirs with it, so that a rank of
// another job (two jobs given the same port) is refused before it writes anything there.
absl::Status CheckSameJob(c10d::Store& store, const RendezvousInfo& info,
                          const std::string& where) {
  constexpr char kJobKey[] = "zt/job_id";
  auto named = [](const std::string& id) {
    return id.empty() ? std::string("(unnamed)") : absl::StrCat("\"", id, "\"");
  };
  try {
    if (info.rank == 0) {
      store.set(kJobKey, std::vector<uint8_t>(info.job_id.begin(), info.job_id.end()));
      return absl::OkStatus();
    }
    const std::vector<uint8_t> value = store.get(kJobKey);
    const std::string theirs(value.begin(), value.end());
    if (theirs == info.job_id) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous: rank ", info.rank, " of job ", named(info.job_id),
                     " reached the store of job ", named(theirs), " at ", where,
                     "; pass --master_port=PORT to the launcher (or "
                     "MASTER_PORT=PORT) to give each job its own port"));
  } catch (const std::exception& e) {
    absl::Status s = StatusFromException(e);
    return absl::Status(
        s.code(), absl::StrCat("rendezvous: rank ", info.rank,
                               " reading the job id from the store at ", where, ": ", s.message()));
  }
}

// Every rank marks its arrival and waits for the others', so that a rank that never comes (a
// world size that disagrees with the ranks the launcher started, a rank that died at start-up)
// is one line naming it, not a backend's timeout on some key.
absl::Status AwaitEveryRank(c10d::Store& store, const RendezvousInfo& info,
                            const std::string& where, std::chrono::milliseconds timeout) {
  auto key = [](int rank) { return absl::StrCat("zt/arrived/", rank); };
  std::vector<std::string> keys;
  for (int r = 0; r < info.world_size; ++r) keys.push_back(key(r));
  try {
    store.set(key(info.rank), std::vector<uint8_t>{1});
    store.wait(keys, timeout);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < info.world_size; ++r) {
        if (!store.check({key(r)})) missing.push_back(r);
      }
    } catch (const std::exception&) {
      // The store is gone too: report what the wait said.
    }
    if (missing.empty()) {
      absl::Status s = StatusFromException(e);
      return absl::Status(
          s.code(), absl::StrCat("rendezvous: rank ", info.rank, " waiting for the other ranks at ",
                                 where, ": ", s.message()));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous: rank", missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "), " of ",
        info.world_size, " did not reach the store at ", where, " within ", timeout.count(),
        " ms (this is rank ", info.rank, "; the world size came from ", info.source,
        "'s variables: did the launcher start ", info.world_size, " ranks?)"));
  }
}

}  // namespace

absl::StatusOr<std::pair<c10::intrusive_ptr<c10d::Store>, int>> JobStore(
    const RendezvousInfo& info, std::chrono::milliseconds timeout) {
  static std::mutex mu;
  static auto* stores = new std::map<std::string, SharedStore>();
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = absl::StrCat(info.master_addr, ":", info.master_port);
  SharedStore& shared = (*stores)[key + "/" + info.store_prefix];
  // torchrun's agent hosts the store already; else rank 0 hosts it.
  const bool host = info.rank == 0 && !info.store_hosted_by_launcher;
  if (!shared.store) {
    if (host && absl::IsFailedPrecondition(CheckPortFree(info.master_port))) {
      return PortInUse(info, key);
    }
    c10::intrusive_ptr<c10d::Store> store;
    try {
      c10d::TCPStoreOptions so;
      so.port = static_cast<uint16_t>(info.master_port);
      so.isServer = host;
      so.numWorkers = info.world_size;
      so.waitWorkers = false;
      so.timeout = timeout;
      store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, so);
    } catch (const std::exception& e) {
      absl::Status s = StatusFromException(e);
      // Taken between the probe and the bind.
      if (host && (absl::StrContains(s.message(), "EADDRINUSE") ||
                   absl::StrContains(s.message(), "Address already in use"))) {
        return PortInUse(info, key);
      }
      return absl::Status(
          s.code(), absl::StrCat("rendezvous: rank ", info.rank, " of ", info.world_size,
                                 " could not ", host ? "host" : "reach", " the store at ", key,
                                 " within ", timeout.count(), " ms: ", s.message()));
    }
    if (!info.store_prefix.empty()) {
      store = c10::make_intrusive<c10d::PrefixStore>(info.store_prefix, store);
    }
    ZT_RETURN_IF_ERROR(CheckSameJob(*store, info, key));
    ZT_RETURN_IF_ERROR(AwaitEveryRank(*store, info, key, timeout));
    shared.store = store;
  }
  return std::make_pair(shared.store, shared.groups++);
}

}  // namespace zerotrain::comm
