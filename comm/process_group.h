// ProcessGroup: the collectives data-parallel ranks need, over Gloo (CPU tensors) or NCCL (CUDA
// tensors). The class owns what every backend shares: sequence numbers, argument checks, padding of
// flat buffers to equal shards, the cross-rank call check, the op log, and error context. Backends
// only move exact-size buffers (see comm/backend.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/backend_kind.h"
#include "comm/comm_log.h"
#include "comm/rendezvous.h"
#include "comm/serial_executor.h"
#include "comm/types.h"
#include "comm/work.h"

namespace zerotrain::comm {

class Backend;
class CallCheck;
struct Transfer;

// kGloo: CPU tensors over TCP (any hosts). kShm: CPU tensors through shared memory, every rank on
// one host; it copies each byte once in and once out where loopback TCP costs several copies and
// the kernel's time, so it is the faster choice for CPU ranks of one machine (docs/COMM.md).
// kNccl: CUDA tensors.
struct GroupOptions {
  BackendKind backend = BackendKind::kGloo;
  // Bounds the rendezvous and every collective: a rank that dies or never calls makes the others
  // fail within this time instead of hanging.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Before each op the ranks compare (sequence number, op, reduction, dtype, count, root) on a
  // side channel, and the transfer starts only if they agree; a disagreement fails the op on every
  // rank with both calls named, instead of corrupting data, hanging, or (Gloo) aborting the
  // process. It costs one small all-gather round trip per op; with Gloo it runs on the group's
  // launcher thread, so *Async calls return without waiting for the peers (docs/COMM.md).
  bool check_calls = true;
  // Record bytes and time of every op (see CommLog).
  bool log_ops = false;
  // Gloo: worker threads per group. The network interface comes from GLOO_SOCKET_IFNAME, or is
  // loopback when MASTER_ADDR is a loopback address, or the host name's address.
  int gloo_threads = 2;
};

// Bytes copied between host memory and a device, each way.
struct HostDeviceBytes {
  int64_t device_to_host = 0;
  int64_t host_to_device = 0;
};

// Adds up the copies that cross between host memory and a device (a copy within either counts
// nothing). Thread-safe: copies may finish on whichever thread waits for them.
class HostDeviceCopies {
 public:
  void Count(const at::Tensor& from, const at::Tensor& to);
  HostDeviceBytes totals() const { return {device_to_host_.load(), host_to_device_.load()}; }

 private:
  std::atomic<int64_t> device_to_host_{0};
  std::atomic<int64_t> host_to_device_{0};
};

class ProcessGroup {
 public:
  // Connects to the TCP store at info.master_addr:master_port (hosted by rank 0) and builds the
  // backend. Fails with the rendezvous step and the timeout named if any rank does not arrive.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(const RendezvousInfo& info,
                                                              const GroupOptions& options);
  // A group of some of this group's ranks: `members` in this group's numbering, ascending, this
  // rank among them; its rank r is members[r]. Every member calls it; every rank of this group
  // makes its subgroups in the same order (the n-th call of each rank is paired with the n-th
  // call of the others, whatever members each names). Same transport and options; its ops are
  // recorded in this group's log, with its own world size.
  absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateSubgroup(const std::vector<int>& members);
  ~ProcessGroup();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const GroupOptions& options() const { return options_; }
  // The device the transport moves data on: CPU for Gloo and shm, cuda:N for NCCL (the current
  // device when the group was made). Tensors may live elsewhere: a collective on a tensor of
  // another device type copies it there and back (so Gloo and shm serve CUDA tensors through host
  // memory, and NCCL host tensors through the device), at the cost of those copies. Small control
  // values are cheapest made here.
  at::Device device() const;
  // True where ReduceScatterAsync costs what AllReduceAsync does plus a full copy of the input
  // (Gloo): a caller that does not need its input afterwards should all-reduce it in place and
  // read its own shard instead (same result, bit for bit, same bytes on the wire).
  bool reduce_scatter_copies_input() const;
  CommLog& log() { return *log_; }
  // The node of each rank, numbered in order of first appearance: ranks whose hosts have one name
  // and one network namespace share a node (so two namespaces of one machine count as two, as
  // the multi-node tests use them). The op log's inter-node bytes follow it.
  const std::vector<int>& node_of_rank() const { return node_of_rank_; }
  // What collectives copied because a tensor was not on the transport's device, since Create.
  HostDeviceBytes staging_traffic() const { return staging_->totals(); }

  // In place on `tensor` (same numel and dtype on every rank).
  Work AllReduceAsync(at::Tensor tensor, ReduceOp op);
  // `input` is the full flat buffer (any numel n); `output` receives this rank's shard of the
  // reduced buffer and must have ShardNumel(n, world_size) elements. When n is not a multiple of
  // the world size the padding is zero and lies at the end of the last shards.
  Work ReduceScatterAsync(at::Tensor input, at::Tensor output, ReduceOp op);
  // Gathers every rank's `shard` (ShardNumel(n) elements) into `output` (n elements, any n); the
  // padding past n is dropped. `output` may instead be a [world_size, m] view whose rows are
  // contiguous but not adjacent (columns of a larger buffer): rank r's shard lands in row r,
  // directly where the transport can (shm), through one m * world_size temporary otherwise.
  // `shard` may be this rank's own part of `output` (in place).
  Work AllGatherAsync(at::Tensor shard, at::Tensor output);
  // `input` and `output` have the same numel, a multiple of world_size, and one dtype: block j of
  // this rank's input lands in block rank() of rank j's output (DeepSpeed's all_to_all_single
  // with equal splits). Over Gloo an exchange of its own; over shared memory and NCCL an
  // all-gather of which each rank keeps its blocks (world_size times the bytes).
  Work AllToAllAsync(at::Tensor input, at::Tensor output);
  Work BroadcastAsync(at::Tensor tensor, int root);
  Work BarrierAsync();

  absl::Status AllReduce(at::Tensor tensor, ReduceOp op);
  absl::Status ReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op);
  absl::Status AllGather(at::Tensor shard, at::Tensor output);
  absl::Status AllToAll(at::Tensor input, at::Tensor output);
  absl::Status Broadcast(at::Tensor tensor, int root);
  absl::Status Barrier();

 private:
  struct FailureState;
  class Launched;
  ProcessGroup(int rank, int world_size, GroupOptions options, std::unique_ptr<Backend> backend,
               std::unique_ptr<CallCheck> check);

  // Builds the backend, the liveness probe and the call check under `prefix` of the job's store;
  // exchanges node names unless `nodes` gives them.
  struct JobStoreHandle;  // the job's store (process_group.cc), kept for subgroups
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Connect(
      std::shared_ptr<JobStoreHandle> shared, const std::string& prefix, int rank, int world_size,
      const std::string& master_addr, const GroupOptions& options, std::vector<int> nodes);
  OpDesc NextOp(CollectiveKind kind, at::ScalarType dtype, int64_t numel, ReduceOp reduce,
                int root);
  // Validates, runs the call check, launches `launch` (skipped for empty buffers) and wraps the
  // steps into a Work. With a launcher the check and launch happen there and the Work's first step
  // waits for them, so `launch` must own what it uses.
  Work Issue(const OpDesc& op, absl::Status valid,
             const std::function<absl::StatusOr<Transfer>()>& launch,
             std::vector<Work::Step> after);
  absl::Status CheckTensor(const at::Tensor& t, const char* what) const;
  // `t` itself when it is on the transport's device type, else a copy there; with copy_back the
  // copy's contents return into t after the transfer (a step appended to `after`).
  at::Tensor Staged(const at::Tensor& t, bool copy_back, std::vector<Work::Step>* after) const;

  int rank_;
  int world_size_;
  GroupOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<CallCheck> check_;
  std::shared_ptr<FailureState> failure_;
  std::shared_ptr<CommLog> log_ = std::make_shared<CommLog>();
  std::shared_ptr<HostDeviceCopies> staging_;  // shared with copy-back steps
  std::vector<int> node_of_rank_;
  std::shared_ptr<JobStoreHandle> store_;
  std::string prefix_;  // this group's keys in the store
  std::string master_addr_;
  int subgroups_ = 0;
  uint64_t next_seq_ = 0;
  // Gloo with the call check: each op's check and launch run here, in issue order, so an *Async
  // call returns without waiting for the peers to reach the same call (which would make every
  // launch a rendezvous). Declared last: destroyed first, after running what is queued.
  std::unique_ptr<SerialExecutor> launcher_;
};

}  // namespace zerotrain::comm
