// Per-op accounting behind CommLog.
#include "comm/comm_log.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerotrain::comm {

double BusBandwidthFactor(CollectiveKind kind, int world_size) {
  const double n = world_size;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return n > 1 ? 2.0 * (n - 1) / n : 0.0;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
      return (n - 1) / n;
    case CollectiveKind::kBroadcast:
      return 1.0;
    case CollectiveKind::kBarrier:
      return 0.0;
  }
  return 0.0;
}

WireBytes ReceivedBytes(CollectiveKind kind, int64_t bytes, int world_size, int rank, int root,
                        const std::vector<int>& node_of_rank) {
  if (world_size <= 1 || kind == CollectiveKind::kBarrier) return {};
  auto node = [&](int r) { return node_of_rank.empty() ? 0 : node_of_rank[r]; };
  int64_t remote_peers = 0;
  for (int r = 0; r < world_size; ++r) remote_peers += node(r) != node(rank);
  const int64_t piece = bytes / world_size;
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return {piece * (world_size - 1), piece * remote_peers};
    case CollectiveKind::kAllReduce:
      return {2 * piece * (world_size - 1), 2 * piece * remote_peers};
    case CollectiveKind::kBroadcast:
      if (rank == root) return {};
      return {bytes, node(root) != node(rank) ? bytes : 0};
    case CollectiveKind::kBarrier:
      break;
  }
  return {};
}

double OpStats::algbw_gbps() const {
  const double t = mean_seconds();
  return t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0.0;
}

double OpStats::busbw_gbps() const { return algbw_gbps() * BusBandwidthFactor(kind, world_size); }

void CommLog::Record(CollectiveKind kind, int64_t bytes, int world_size, double seconds,
                     WireBytes wire) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    OpStats& s = stats_[{static_cast<int>(kind), bytes, world_size}];
    if (s.count == 0) {
      s.kind = kind;
      s.bytes = bytes;
      s.wire = wire;
      s.world_size = world_size;
      s.min_seconds = seconds;
    }
    s.count += 1;
    s.total_seconds += seconds;
    s.min_seconds = std::min(s.min_seconds, seconds);
  }
  if (each_op_) {
    OpStats one;
    one.kind = kind;
    one.bytes = bytes;
    one.wire = wire;
    one.world_size = world_size;
    one.count = 1;
    one.total_seconds = one.min_seconds = seconds;
    each_op_(one);
  }
}

std::string OpLine(const OpStats& op) {
  return absl::StrFormat("%s %d B %.3f ms algbw %.3f GB/s busbw %.3f GB/s", CollectiveName(op.kind),
                         op.bytes, op.mean_seconds() * 1e3, op.algbw_gbps(), op.busbw_gbps());
}

std::vector<OpStats> CommLog::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OpStats> out;
  for (const auto& [key, s] : stats_) out.push_back(s);
  return out;
}

CommTotals CommLog::Totals() const {
  CommTotals t;
  for (const OpStats& s : Stats()) {
    t.calls += s.count;
    t.bytes += s.count * s.bytes;
    t.received += s.count * s.wire.received;
    t.inter_node += s.count * s.wire.inter_node;
  }
  return t;
}

std::string CommLog::Summary(const std::vector<CollectiveKind>& only) const {
  std::string out =
      absl::StrFormat("%-15s %5s %14s %8s %12s %12s %12s %14s %14s\n", "op", "ranks", "bytes",
                      "calls", "mean_us", "algbw_GB/s", "busbw_GB/s", "recv_B", "inter_node_B");
  CommTotals shown;
  for (const OpStats& s : Stats()) {
    if (!only.empty() && std::find(only.begin(), only.end(), s.kind) == only.end()) continue;
    out += absl::StrFormat("%-15s %5d %14d %8d %12.1f %12.3f %12.3f %14d %14d\n",
                           CollectiveName(s.kind), s.world_size, s.bytes, s.count,
                           s.mean_seconds() * 1e6, s.algbw_gbps(), s.busbw_gbps(), s.wire.received,
                           s.wire.inter_node);
    shown.received += s.count * s.wire.received;
    shown.inter_node += s.count * s.wire.inter_node;
  }
  out += absl::StrFormat("received in all: %d B, of which from other nodes: %d B\n", shown.received,
                         shown.inter_node);
  return out;
}

void CommLog::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.clear();
}

std::vector<CollectiveKind> ReportedOps(const CommReportOptions& options) {
  using K = CollectiveKind;
  std::vector<K> out;
  for (K k : {K::kAllReduce, K::kReduceScatter, K::kAllGather, K::kAllToAll, K::kBroadcast,
              K::kBarrier}) {
    const auto& names = options.prof_ops;
    const bool listed = std::find(names.begin(), names.end(), CollectiveName(k)) != names.end();
    if (options.prof_all || listed) out.push_back(k);
  }
  return out;
}

void PrintEachOp(const CommReportOptions& options, CommLog& log) {
  if (!options.verbose) return;
  log.OnEachOp([ops = ReportedOps(options)](const OpStats& op) {
    if (std::find(ops.begin(), ops.end(), op.kind) == ops.end()) return;
    std::printf("comm op: %s\n", OpLine(op).c_str());
    std::fflush(stdout);  // interleaved with a Python script's own prints
  });
}

std::string Report(const CommReportOptions& options, const CommLog& log) {
  const std::vector<CollectiveKind> ops = ReportedOps(options);
  if (ops.empty()) return "collectives of rank 0: none profiled (prof_all false, prof_ops empty)\n";
  return absl::StrCat("collectives of rank 0", options.prof_all ? "" : " (prof_ops)", ":\n",
                      log.Summary(ops));
}

}  // namespace zerotrain::comm
