// ProcessGroup: rendezvous, argument checks, padding and error context over any Backend.
#include "comm/process_group.h"

#include <ATen/core/Tensor.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/backend.h"
#include "comm/call_check.h"
#include "comm/local_route.h"
#include "comm/peer_probe.h"
#include "comm/store_rendezvous.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

// A transfer that timed out: Gloo does not say for whom it waited, and in a ring every live rank
// waits too, so the peers that no longer answer a ping are named (peer_probe.h).
Work::Step NamingSilentPeers(Work::Step wait, std::shared_ptr<PeerProbe> probe,
                             std::chrono::milliseconds timeout) {
  if (!probe || !wait) return wait;
  return [wait = std::move(wait), probe = std::move(probe), timeout]() -> absl::Status {
    absl::Status s = wait();
    if (!absl::IsDeadlineExceeded(s)) return s;
    const auto grace = std::min<std::chrono::milliseconds>(timeout / 2, std::chrono::seconds(1));
    const std::vector<int> silent = probe->Silent(grace);
    const std::string who =
        silent.empty()
            ? std::string("every peer answered a liveness probe, so none is stopped or cut off")
            : absl::StrCat("rank", silent.size() > 1 ? "s " : " ", absl::StrJoin(silent, ", "),
                           " did not answer a liveness probe within ", grace.count(),
                           " ms (stopped, hung or unreachable)");
    return absl::Status(s.code(), absl::StrCat(s.message(), "; ", who));
  };
}

// This process's machine as the other ranks should tell it apart: host name, the kernel's boot
// id (machines that share a host name differ there) and network namespace (which the multi-node
// tests use as machines; the host's namespace has one inode number on every machine).
std::string NodeKey() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char id[64] = {};
    if (std::fgets(id, sizeof(id), f) != nullptr) boot = id;
    std::fclose(f);
    while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) boot.pop_back();
  }
  struct stat ns {};
  const ino_t netns = stat("/proc/self/ns/net", &ns) == 0 ? ns.st_ino : 0;
  return absl::StrCat(host, "/boot:", boot, "/netns:", netns);
}

// Every rank leaves its NodeKey in the store and reads the others'; node numbers follow the
// order in which ranks first name a key.
absl::StatusOr<std::vector<int>> ExchangeNodes(const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int world_size) {
  try {
    const std::string mine = NodeKey();
    store->set(absl::StrCat(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> names;
    for (int r = 0; r < world_size; ++r) names.push_back(absl::StrCat(r));
    store->wait(names);  // bounded by the store's timeout
    const std::vector<std::vector<uint8_t>> values = store->multiGet(names);
    std::vector<std::string> keys;
    std::vector<int> node_of_rank;
    for (int r = 0; r < world_size; ++r) {
      const std::string key(values[r].begin(), values[r].end());
      const auto it = std::find(keys.begin(), keys.end(), key);
      node_of_rank.push_back(static_cast<int>(it - keys.begin()));
      if (it == keys.end()) keys.push_back(key);
    }
    return node_of_rank;
  } catch (const std::exception& e) {
    return absl::DeadlineExceededError(
        absl::StrCat("comm: rank ", rank, " exchanging node names in the store: ", e.what()));
  }
}

bool SupportedDtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kInt:
    case at::kLong:
    case at::kByte:
    case at::kChar:
      return true;
    default:
      return false;
  }
}

}  // namespace

// The group's first failure, and what explains a transfer that timed out: the probe naming the
// peers that stopped answering (null for one rank). Shared with the ops' steps, which may
// outlive a call.
struct ProcessGroup::FailureState {
  std::mutex mu;
  absl::Status first;
  std::shared_ptr<PeerProbe> probe;
};

struct ProcessGroup::JobStoreHandle {
  c10::intrusive_ptr<c10d::Store> store;
};

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(const RendezvousInfo& info,
                                                                   const GroupOptions& options) {
  if (options.timeout <= std::chrono::milliseconds(0) || options.timeout > std::chrono::hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "comm: GroupOptions.timeout must be in (0, 24 h], got ", options.timeout.count(), " ms"));
  }
  auto shared = JobStore(info, options.timeout);
  if (!shared.ok()) return shared.status();
  return Connect(std::make_shared<JobStoreHandle>(JobStoreHandle{shared->first}),
                 absl::StrCat("zt/group", shared->second, "/"), info.rank, info.world_size,
                 info.master_addr, options, {});
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::CreateSubgroup(
    const std::vector<int>& members) {
  int local = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= world_size_ || (i > 0 && members[i] <= members[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("comm: subgroup members [", absl::StrJoin(members, ", "),
                       "] must be distinct ranks of 0..", world_size_ - 1, ", ascending"));
    }
    if (members[i] == rank_) local = static_cast<int>(i);
  }
  if (local < 0) {
    return absl::InvalidArgumentError(absl::StrCat("comm: rank ", rank_, " made a subgroup [",
                                                   absl::StrJoin(members, ", "),
                                                   "] it is not a member of"));
  }
  std::vector<int> nodes;
  for (int m : members) nodes.push_back(node_of_rank_[m]);
  const std::string prefix =
      absl::StrCat(prefix_, "sub", subgroups_++, "/", absl::StrJoin(members, "-"), "/");
  auto sub = Connect(store_, prefix, local, static_cast<int>(members.size()), master_addr_,
                     options_, std::move(nodes));
  if (sub.ok()) (*sub)->log_ = log_;
  return sub;
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Connect(
    std::shared_ptr<JobStoreHandle> handle, const std::string& prefix, int rank, int world_size,
    const std::string& master_addr, const GroupOptions& options, std::vector<int> nodes) {
  const c10::intrusive_ptr<c10d::Store>& shared = handle->store;
  BackendContext ctx;
  ctx.rank = rank;
  ctx.world_size = world_size;
  ctx.master_addr = master_addr;
  ctx.timeout = options.timeout;
  ctx.gloo_threads = options.gloo_threads;
  ctx.store = c10::make_intrusive<c10d::PrefixStore>(prefix + "data", shared);
  // NCCL chooses its own socket interface; the one that routes to MASTER_ADDR reaches the others.
  if (options.backend == BackendKind::kNccl) PointNcclAtRoute(master_addr);
  auto backend = options.backend == BackendKind::kGloo  ? MakeGlooBackend(ctx)
                 : options.backend == BackendKind::kShm ? MakeShmBackend(ctx)
                                                        : MakeNcclBackend(ctx);
  if (!backend.ok()) return backend.status();
  std::shared_ptr<PeerProbe> probe;
  if (world_size > 1) {
    auto route = ChooseLocalRoute(master_addr, 0, "GLOO_SOCKET_IFNAME");
    if (!route.ok()) return route.status();
    ctx.store = c10::make_intrusive<c10d::PrefixStore>(prefix + "probe", shared);
    auto connected = PeerProbe::Connect(ctx, route->address);
    if (!connected.ok()) return connected.status();
    probe = *std::move(connected);
  }
  if (nodes.empty()) {
    nodes.assign(world_size, 0);
    if (world_size > 1) {
      ZT_ASSIGN_OR_RETURN(
          nodes, ExchangeNodes(c10::make_intrusive<c10d::PrefixStore>(prefix + "node", shared),
                               rank, world_size));
    }
  }
  std::unique_ptr<CallCheck> check;
  if (options.check_calls) {
    ctx.store = c10::make_intrusive<c10d::PrefixStore>(prefix + "check", shared);
    auto connected = CallCheck::Connect(ctx);
    if (!connected.ok()) return connected.status();
    check = *std::move(connected);
  }
  auto group = std::unique_ptr<ProcessGroup>(
      new ProcessGroup(rank, world_size, options, *std::move(backend), std::move(check)));
  group->failure_->probe = std::move(probe);
  group->node_of_rank_ = std::move(nodes);
  group->store_ = std::move(handle);
  group->prefix_ = prefix;
  group->master_addr_ = master_addr;
  return group;
}

ProcessGroup::ProcessGroup(int rank, int world_size, GroupOptions options,
                           std::unique_ptr<Backend> backend, std::unique_ptr<CallCheck> check)
    : rank_(rank),
      world_size_(world_size),
      options_(std::move(options)),
      backend_(std::move(backend)),
      check_(std::move(check)),
      failure_(std::make_shared<FailureState>()),
      staging_(std::make_shared<HostDeviceCopies>()) {
  // NCCL launches stay on the caller's thread, where its CUDA device and stream are set.
  if (check_ && options_.backend != BackendKind::kNccl) {
    launcher_ = std::make_unique<SerialExecutor>();
  }
}

ProcessGroup::~ProcessGroup() = default;

bool ProcessGroup::reduce_scatter_copies_input() const {
  return backend_->reduce_scatter_copies_input();
}

at::Device ProcessGroup::device() const {
  const int index = backend_->device_index();
  return index >= 0 ? at::Device(backend_->device_type(), static_cast<c10::DeviceIndex>(index))
                    : at::Device(backend_->device_type());
}

OpDesc ProcessGroup::NextOp(CollectiveKind kind, at::ScalarType dtype, int64_t numel,
                            ReduceOp reduce, int root) {
  OpDesc op;
  op.kind = kind;
  op.seq = next_seq_++;
  op.rank = rank_;
  op.world_size = world_size_;
  op.reduce = reduce;
  op.dtype = dtype;
  op.numel = numel;
  op.root = root;
  return op;
}

absl::Status ProcessGroup::CheckTensor(const at::Tensor& t, const char* what) const {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(what, " is undefined"));
  if (!t.is_contiguous())
    return absl::InvalidArgumentError(absl::StrCat(what, " is not contiguous"));
  // Another device type is staged (collectives.cc); another device of the backend's type is not.
  const int index = backend_->device_index();
  if (t.device().type() == backend_->device_type() && index >= 0 && t.device().index() != index) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is on ", t.device().str(), " but this group's communicator uses device ", index));
  }
  if (!SupportedDtype(t.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has unsupported dtype ", c10::toString(t.scalar_type())));
  }
  return absl::OkStatus();
}

// What the launcher thread hands back for one op: whether its check and launch succeeded, and the
// step that waits for the transfer.
class ProcessGroup::Launched {
 public:
  void Finish(absl::Status status, Work::Step step) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      step_ = std::move(step);
      done_ = true;
    }
    cv_.notify_all();
  }
  // Waits for the launch, then for the transfer.
  absl::Status Run(std::chrono::milliseconds limit) {
    Work::Step step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        return absl::DeadlineExceededError(
            absl::StrCat("the call check and launch did not finish within ", limit.count(), " ms"));
      }
      if (!status_.ok()) return status_;
      step = step_;
    }
    return step ? step() : absl::OkStatus();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
  Work::Step step_;
};

Work ProcessGroup::Issue(const OpDesc& op, absl::Status valid,
                         const std::function<absl::StatusOr<Transfer>()>& launch,
                         std::vector<Work::Step> after) {
  std::shared_ptr<FailureState> failure = failure_;
  Work::FailureSink sink = [failure](const absl::Status& s) {
    std::lock_guard<std::mutex> lock(failure->mu);
    if (failure->first.ok()) failure->first = s;
  };
  // A failed check or launch latches the group at once, not when someone waits: later calls must
  // not start another timeout-long check, or touch a backend that gave up.
  auto failed = [&](absl::Status s) {
    sink(WithOpContext(op, s));
    return Work(op, {[s] { return s; }}, nullptr);
  };
  {
    std::lock_guard<std::mutex> lock(failure->mu);
    if (!failure->first.ok()) {
      return Work(op, {[s = failure->first] {
                    return absl::FailedPreconditionError(absl::StrCat(
                        "the group is unusable after an earlier failure: ", s.message()));
                  }},
                  nullptr);
    }
  }
  // A bad argument sends nothing, so it leaves the group usable.
  if (!valid.ok()) return Work(op, {[valid] { return valid; }}, nullptr);
  std::vector<Work::Step> steps;
  std::vector<Work::Step> on_stream;
  const auto start = std::chrono::steady_clock::now();
  const bool transfers = op.numel > 0 || op.kind == CollectiveKind::kBarrier;
  if (launcher_) {
    // The check completes before the transfer starts, as below, but on the launcher thread; the
    // Work's first step waits for both. An op queued behind a failure does not start.
    auto launched = std::make_shared<Launched>();
    launcher_->Post([this, op, launch, transfers, failure, sink, launched] {
      absl::Status s;
      {
        std::lock_guard<std::mutex> lock(failure->mu);
        if (!failure->first.ok()) {
          s = absl::FailedPreconditionError(absl::StrCat(
              "the group is unusable after an earlier failure: ", failure->first.message()));
        }
      }
      const bool was_usable = s.ok();
      if (s.ok()) s = check_->Agree(op);
      Work::Step step;
      if (s.ok() && transfers) {
        auto started = launch();
        if (started.ok()) {
          step = NamingSilentPeers(std::move(started->wait), failure->probe, options_.timeout);
        } else {
          s = started.status();
        }
      }
      if (!s.ok() && was_usable) sink(WithOpContext(op, s));
      launched->Finish(s, std::move(step));
    });
    // Bounded: the check gives up after the timeout, and a launch only enqueues.
    const auto limit = 2 * options_.timeout + std::chrono::seconds(10);
    steps.push_back([launched, limit] { return launched->Run(limit); });
  } else {
    if (check_) {
      // The check completes before the transfer starts: Gloo aborts the whole process when a
      // transfer's sizes disagree between ranks, so a disagreement must be caught first.
      absl::Status agreed = check_->Agree(op);
      if (!agreed.ok()) return failed(agreed);
    }
    if (transfers) {
      auto transfer = launch();
      if (!transfer.ok()) return failed(transfer.status());
      steps.push_back(
          NamingSilentPeers(std::move(transfer->wait), failure->probe, options_.timeout));
      on_stream.resize(steps.size());
      on_stream.back() = std::move(transfer->order_stream);
    }
  }
  for (Work::Step& s : after) steps.push_back(std::move(s));
  if (options_.log_ops) {
    const WireBytes wire =
        ReceivedBytes(op.kind, op.bytes(), op.world_size, op.rank, op.root, node_of_rank_);
    steps.push_back([log = log_, op, start, wire] {
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      log->Record(op.kind, op.bytes(), op.world_size, took.count(), wire);
      return absl::OkStatus();
    });
  }
  on_stream.resize(steps.size());
  return Work(op, std::move(steps), std::move(on_stream), sink);
}

}  // namespace zerotrain::comm
