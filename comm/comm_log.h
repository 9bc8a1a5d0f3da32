// CommLog: bytes and time of each collective, summarised as algorithm and bus bandwidth with the
// definitions of nccl-tests, so figures compare with NCCL's own measurements.
//   algbw = size / time, where size is the full buffer (the reduce-scatter input, the all-gather
//           output, the all-reduce or broadcast tensor);
//   busbw = algbw * 2(n-1)/n for all-reduce, * (n-1)/n for reduce-scatter and all-gather,
//           * 1 for broadcast.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/types.h"

namespace zerotrain::comm {

double BusBandwidthFactor(CollectiveKind kind, int world_size);

// What one call of an op brings into this rank from its peers: the payload the op's algorithm
// must receive at the least, whatever route the transport takes (a ring relays more through
// each rank, but the same amount crosses each node boundary), and how much of it comes from ranks
// on other nodes. Per call: an all-gather, reduce-scatter or all-to-all of `bytes` (the full
// buffer) receives bytes/n from each peer, an all-reduce twice that, a broadcast `bytes` from its
// root.
struct WireBytes {
  int64_t received = 0;
  int64_t inter_node = 0;
};
// node_of_rank[r]: the node of rank r of the group; empty means every rank on one node.
WireBytes ReceivedBytes(CollectiveKind kind, int64_t bytes, int world_size, int rank, int root,
                        const std::vector<int>& node_of_rank);

struct OpStats {
  CollectiveKind kind = CollectiveKind::kBarrier;
  int64_t bytes = 0;  // per call
  WireBytes wire;     // per call
  int world_size = 1;
  int64_t count = 0;
  double total_seconds = 0;
  double min_seconds = 0;

  double mean_seconds() const { return count ? total_seconds / count : 0; }
  double algbw_gbps() const;  // from the mean time, in GB/s (1e9 bytes)
  double busbw_gbps() const;
};

// Sums over every call since the last Clear.
struct CommTotals {
  int64_t calls = 0;
  int64_t bytes = 0;
  int64_t received = 0;
  int64_t inter_node = 0;
};

class CommLog {
 public:
  void Record(CollectiveKind kind, int64_t bytes, int world_size, double seconds,
              WireBytes wire = {});
  // One entry per (op, size, ranks), ordered by op, size, then ranks.
  std::vector<OpStats> Stats() const;
  CommTotals Totals() const;
  // A table: op, ranks, size, calls, mean time, algbw, busbw, bytes received per call and of them
  // from other nodes; only the ops in `only` when given.
  std::string Summary(const std::vector<CollectiveKind>& only = {}) const;
  // Called with each op as it is recorded (count 1), outside the log's lock: DeepSpeed's
  // comms_logger.verbose. Set it before the first op.
  void OnEachOp(std::function<void(const OpStats&)> fn) { each_op_ = std::move(fn); }
  void Clear();

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<int, int64_t, int>, OpStats> stats_;
  std::function<void(const OpStats&)> each_op_;
};

// "all_reduce 4096 B 0.120 ms algbw 0.034 GB/s busbw 0.034 GB/s": one op, for the verbose log.
std::string OpLine(const OpStats& op);

// What a run reports of its log, as DeepSpeed's comms_logger says: every op (prof_all), or those
// prof_ops names (all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, barrier); with
// verbose, a
// line per op as it completes. //trainer:main and the Python front end report through these.
struct CommReportOptions {
  bool verbose = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;
};
std::vector<CollectiveKind> ReportedOps(const CommReportOptions& options);
// With options.verbose, each reported op from now on is printed to stdout ("comm op: <OpLine>");
// otherwise nothing. Call it before the first op.
void PrintEachOp(const CommReportOptions& options, CommLog& log);
// The end-of-run report: "collectives of rank 0:" and the summary of the reported ops, or a line
// saying that none is reported.
std::string Report(const CommReportOptions& options, const CommLog& log);

}  // namespace zerotrain::comm
