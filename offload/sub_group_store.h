// SubGroupStore: the per-element state of one rank's optimizer shard (master weights and
// moments: several arrays of the same length, each of 4-byte or 2-byte elements: fp32, or bf16
// under bf16 master weights / optimizer states), cut into sub-groups of sub_group_numel elements,
// kept in host memory or swapped to NVMe. The optimizer reaches it only through Visit, one
// sub-group at a time, which is what lets the NVMe store hold just `buffer_count` sub-groups in
// memory and read the next sub-group while the caller steps the current one (ZeRO-Infinity's
// double-buffering). One mechanism for every device: the engine steps, initialises, checkpoints
// and overwrites its master weights through Visit whether the state is offloaded or not.
//
// NVMe layout: one SwapSpace region per sub-group, "<region_prefix>sg<g>", holding the arrays
// back to back (array a of sub-group g after the arrays before it, each numel(g) times its
// element bytes rounded up to 4), and with `grads` one more,
// "<region_prefix>grad<g>", for its gradients. Regions are reserved (their files preallocated) at
// Create, so a full disk fails there; preallocated files read as zeros, which is the initial
// state, so Create writes nothing.
//
// Gradients: with `grads` the store also keeps one fp32 gradient per element, apart from the
// state (never part of a checkpoint, never written by a visit). Backward streams them in, in
// shard order, through a gradient pass that holds one sub-group in memory at a time, and the
// optimizer step reads them with the state (VisitWithGrads). That is what lets ZeRO-Infinity's
// rank keep no gradient shard in memory (DeepSpeed swaps its fp32 gradient partitions out to the
// optimizer's swap files too, at the accumulation boundary).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "offload/pinned_host_pool.h"
#include "offload/swap_space.h"

namespace zerotrain::offload {

enum class StoreDevice { kHost, kNvme };
const char* StoreDeviceName(StoreDevice d);  // "host", "nvme"

struct SubGroupStoreOptions {
  std::vector<std::string> arrays;  // names, e.g. {"master", "exp_avg", "exp_avg_sq"}; >= 1
  int64_t numel = 0;                // elements in each array; > 0
  // Bytes per element of each array, 4 or 2; empty: 4 for every array. The store moves bytes and
  // never converts: what a 2-byte element means (bf16) is the caller's.
  std::vector<int> element_bytes;
  int64_t sub_group_numel = 0;  // elements per sub-group (the last may be shorter); > 0
  StoreDevice device = StoreDevice::kHost;
  // kHost only: memory the caller owns for some arrays (numel elements, alive as long as the
  // store), e.g. parameters that double as master weights; nullptr = the store allocates.
  // Empty, or one entry per array.
  std::vector<void*> external;
  PinnedHostPool* pool = nullptr;  // required: where host memory (arrays or buffers) comes from
  SwapSpace* swap = nullptr;       // required for kNvme
  std::string region_prefix;       // kNvme: e.g. "rank0."; region names follow SwapSpace's rules
  // kNvme: sub-groups in host memory at once; 1 serialises I/O and compute, 2 or more let the
  // read of the next sub-groups (and the write of the previous) overlap the current one.
  int buffer_count = 4;
  absl::Duration io_timeout = absl::Minutes(5);  // per swap-in/out wait
  // Keep a gradient array too (see above). kNvme adds buffer_count sub-group gradient buffers.
  bool grads = false;
};

// One sub-group's arrays, in host memory for the duration of a Visit callback.
struct SubGroupView {
  int index = 0;      // sub-group number
  int64_t begin = 0;  // first element (of every array) this sub-group holds
  int64_t numel = 0;
  // arrays[a] points at element `begin` of array a (of the array's element_bytes).
  std::vector<void*> arrays;
  // VisitWithGrads: the sub-group's gradients as the last pass left them; null otherwise.
  const float* grads = nullptr;
  // Array a as fp32 (an array of 4-byte elements).
  float* floats(size_t a) const { return static_cast<float*>(arrays[a]); }
};

// Called by a gradient pass with each sub-group's final values, in order, before they are
// stored: where the caller takes their norm and checks them for inf/NaN without a second read.
using GradSumsFn = std::function<absl::Status(int64_t begin, const float* grads, int64_t numel)>;

enum class Access {
  kRead,       // contents are read; nothing is written back
  kWrite,      // the callback overwrites every element of every array: nothing is read first
  kReadWrite,  // read, changed in place, written back
};

class SubGroupStore {
 public:
  // Checks the options (InvalidArgument naming the field and value), allocates the host memory
  // (kHost: every array not external, zero-filled; kNvme: buffer_count sub-group buffers) and,
  // for kNvme, reserves one region per sub-group. Errors from the pool (ResourceExhausted) and the
  // swap space (a full disk, an unwritable path) pass through with "SubGroupStore: " in front.
  static absl::StatusOr<std::unique_ptr<SubGroupStore>> Create(const SubGroupStoreOptions& options);
  ~SubGroupStore();  // waits (up to io_timeout each) for transfers still in flight
  SubGroupStore(const SubGroupStore&) = delete;
  SubGroupStore& operator=(const SubGroupStore&) = delete;

  using VisitFn = std::function<absl::Status(const SubGroupView&)>;
  // Calls `fn` for every sub-group that overlaps [begin, end), in increasing order, with its
  // whole arrays in host memory (fn sees the full sub-group, not just the overlap). kNvme reads
  // ahead up to buffer_count sub-groups and writes each back (unless kRead) once fn returns, then
  // waits for every write before returning. An error from fn stops the visit (what fn changed in
  // that sub-group is not written back) and is returned as it is. An I/O error or timeout is
  // returned naming the region and file, and poisons the store: every later Visit fails with
  // FailedPrecondition quoting it, because the swapped state may be half-written, except a kWrite
  // of the whole store (e.g. a checkpoint load), whose success heals it. A callback that throws
  // is an InternalError like an error it returns.
  absl::Status Visit(int64_t begin, int64_t end, Access access, const VisitFn& fn);
  absl::Status VisitAll(Access access, const VisitFn& fn) { return Visit(0, numel(), access, fn); }
  // VisitAll (kRead or kReadWrite) whose views also carry the gradients (options.grads), read
  // ahead with the arrays.
  absl::Status VisitWithGrads(Access access, const VisitFn& fn);

  // A gradient pass (options.grads): BeginGrads, AddGrads over ranges in increasing order that do
  // not overlap, FinishGrads. `accumulate` adds the ranges to what the last pass left; otherwise
  // they replace it, and what no range covers becomes zero. `on_summed` (may be empty) sees every
  // sub-group once its values are final. kNvme holds one sub-group's gradients in memory at a
  // time, writing it out as the next begins (and, when accumulating, reading it first). A range
  // out of order fails and ends the pass; an I/O error poisons the store, as in Visit. A pass
  // begun again before FinishGrads starts over (what the abandoned one wrote stays), and until a
  // pass finishes VisitWithGrads refuses: the gradients would be a mix of two passes.
  absl::Status BeginGrads(bool accumulate, GradSumsFn on_summed);
  absl::Status AddGrads(int64_t begin, const float* grads, int64_t numel);
  absl::Status FinishGrads();  // waits for every write

  // kHost: array a's numel elements; kNvme: nullptr (reach it through Visit).
  void* resident(int array) const;
  int element_bytes(int array) const;  // 4 or 2

  const SubGroupStoreOptions& options() const { return options_; }
  int64_t numel() const { return options_.numel; }
  int num_arrays() const { return static_cast<int>(options_.arrays.size()); }
  int num_sub_groups() const;
  // Host memory the store allocated (not the external arrays): kHost the arrays (and gradients),
  // kNvme the buffers.
  int64_t host_bytes() const;
  int64_t nvme_bytes() const;  // bytes of the swap files' contents, gradients too (0 for kHost)
  // OK, or the I/O error that poisoned the store.
  absl::Status health() const;

 private:
  struct Impl;
  explicit SubGroupStore(const SubGroupStoreOptions& options);
  const SubGroupStoreOptions options_;
  std::unique_ptr<Impl> impl_;  // refers to options_, so declared after it
};

}  // namespace zerotrain::offload
