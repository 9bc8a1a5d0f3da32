// comm_bench: bus bandwidth of all-reduce, reduce-scatter and all-gather, 4 KiB to 256 MiB, on 2
// and 4 local ranks, for zerotrain's ProcessGroup over Gloo (call check on and off), over shared
// memory (the shm backend, call check on), and for the same calls made straight on c10d's
// ProcessGroupGloo, in one run. Prints a markdown table.
//   bazel run -c opt //comm:comm_bench [-- --max_mib=256 --worlds=2,4]
// Started without rank variables it launches the ranks itself (comm/launcher.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/comm_log.h"
#include "comm/gloo_backend.h"
#include "comm/launcher.h"
#include "comm/process_group.h"
#include "comm/rendezvous.h"

namespace zerotrain::comm {
namespace {

using Clock = std::chrono::steady_clock;
using Op = std::function<void(at::Tensor&, at::Tensor&)>;

// Seconds per call of each variant: 7 rounds, each timing one block of `iters` calls per variant
// in turn (so drift on this shared 2-core machine hits all variants alike); the median round.
std::vector<double> TimeVariants(ProcessGroup& sync, at::Tensor& in, at::Tensor& out,
                                 const std::vector<Op>& ops, int iters) {
  constexpr int kRounds = 7;
  std::vector<std::vector<double>> rounds(ops.size());
  for (const Op& op : ops) op(in, out);  // warm-up
  for (int r = 0; r < kRounds; ++r) {
    for (size_t v = 0; v < ops.size(); ++v) {
      if (!sync.Barrier().ok()) std::abort();
      const auto start = Clock::now();
      for (int i = 0; i < iters; ++i) ops[v](in, out);
      rounds[v].push_back(std::chrono::duration<double>(Clock::now() - start).count() / iters);
    }
  }
  std::vector<double> median;
  for (auto& times : rounds) {
    std::sort(times.begin(), times.end());
    median.push_back(times[kRounds / 2]);
  }
  return median;
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "comm_bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

int RunRank(const RendezvousInfo& info, int64_t max_bytes) {
  GroupOptions checked;
  GroupOptions unchecked;
  unchecked.check_calls = false;
  auto ours = ProcessGroup::Create(info, checked);
  Check(ours.status());
  auto ours_nocheck = ProcessGroup::Create(info, unchecked);
  Check(ours_nocheck.status());
  GroupOptions shm_options;
  shm_options.backend = BackendKind::kShm;
  auto shm = ProcessGroup::Create(info, shm_options);
  Check(shm.status());
  // The bare c10d group gets a store of its own so nothing of ours sits between it and Gloo.
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(info.master_port + 1);
  so.isServer = info.rank == 0;
  so.numWorkers = info.world_size;
  auto store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, so);
  BackendContext ctx;
  ctx.store = store;
  ctx.rank = info.rank;
  ctx.world_size = info.world_size;
  ctx.master_addr = info.master_addr;
  ctx.timeout = std::chrono::minutes(5);
  auto bare_or = ConnectGloo(ctx);
  Check(bare_or.status());
  c10::intrusive_ptr<c10d::Backend> bare = *bare_or;
  const int w = info.world_size;

  struct Variant {
    const char* name;
    CollectiveKind kind;
    Op bare, ours, nocheck, shm;
  };
  auto sum = c10d::AllreduceOptions();
  std::vector<Variant> variants = {
      {"all_reduce", CollectiveKind::kAllReduce,
       [&](at::Tensor& in, at::Tensor&) {
         std::vector<at::Tensor> v{in};
         bare->allreduce(v, sum)->wait();
       },
       [&](at::Tensor& in, at::Tensor&) { Check((*ours)->AllReduce(in, ReduceOp::kSum)); },
       [&](at::Tensor& in, at::Tensor&) { Check((*ours_nocheck)->AllReduce(in, ReduceOp::kSum)); },
       [&](at::Tensor& in, at::Tensor&) { Check((*shm)->AllReduce(in, ReduceOp::kSum)); }},
      {"reduce_scatter", CollectiveKind::kReduceScatter,
       [&](at::Tensor& in, at::Tensor& out) { bare->_reduce_scatter_base(out, in)->wait(); },
       [&](at::Tensor& in, at::Tensor& out) {
         Check((*ours)->ReduceScatter(in, out, ReduceOp::kSum));
       },
       [&](at::Tensor& in, at::Tensor& out) {
         Check((*ours_nocheck)->ReduceScatter(in, out, ReduceOp::kSum));
       },
       [&](at::Tensor& in, at::Tensor& out) {
         Check((*shm)->ReduceScatter(in, out, ReduceOp::kSum));
       }},
      {"all_gather", CollectiveKind::kAllGather,
       [&](at::Tensor& full, at::Tensor& shard) { bare->_allgather_base(full, shard)->wait(); },
       [&](at::Tensor& full, at::Tensor& shard) { Check((*ours)->AllGather(shard, full)); },
       [&](at::Tensor& full, at::Tensor& shard) { Check((*ours_nocheck)->AllGather(shard, full)); },
       [&](at::Tensor& full, at::Tensor& shard) { Check((*shm)->AllGather(shard, full)); }},
  };
  if (info.rank == 0) {
    std::printf(
        "\n%d ranks\n\n| op | size | bare c10d busbw GB/s | ours busbw GB/s | ours/bare | "
        "ours, check off GB/s | check off/bare | shm busbw GB/s | shm/bare |\n"
        "|---|---|---|---|---|---|---|---|---|\n",
        w);
  }
  for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = bytes / 4;
    const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 1, 100));
    at::Tensor full = at::ones({n});
    at::Tensor shard = at::ones({ShardNumel(n, w)});
    for (const Variant& v : variants) {
      const std::vector<double> t =
          TimeVariants(**ours, full, shard, {v.bare, v.ours, v.nocheck, v.shm}, iters);
      const double t_bare = t[0], t_ours = t[1], t_off = t[2], t_shm = t[3];
      const double f = BusBandwidthFactor(v.kind, w) * bytes / 1e9;
      if (info.rank == 0) {
        std::printf("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", v.name,
                    bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB").c_str()
                                       : absl::StrCat(bytes >> 10, " KiB").c_str(),
                    f / t_bare, f / t_ours, t_bare / t_ours, f / t_off, t_bare / t_off, f / t_shm,
                    t_bare / t_shm);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace zerotrain::comm

int main(int argc, char** argv) {
  std::string max_mib = "256", worlds = "2,4";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--max_mib=", 0) == 0)
      max_mib = a.substr(10);
    else if (a.rfind("--worlds=", 0) == 0)
      worlds = a.substr(9);
    else {
      std::fprintf(stderr, "comm_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  int64_t mib = 0;
  if (!absl::SimpleAtoi(max_mib, &mib) || mib < 1) {
    std::fprintf(stderr, "comm_bench: --max_mib=%s is not a positive integer\n", max_mib.c_str());
    return 2;
  }
  if (std::getenv("RANK") != nullptr) {
    zerotrain::comm::DieWithLauncher();
    auto info = zerotrain::comm::RendezvousFromEnv();
    zerotrain::comm::Check(info.status());
    return zerotrain::comm::RunRank(*info, mib << 20);
  }
  int port = 29700;
  for (absl::string_view w : absl::StrSplit(worlds, ',')) {
    int world = 0;
    if (!absl::SimpleAtoi(w, &world) || world < 1) {
      std::fprintf(stderr, "comm_bench: --worlds entry '%s' is not a positive integer\n",
                   std::string(w).c_str());
      return 2;
    }
    zerotrain::comm::LaunchOptions launch;
    launch.nproc_per_node = world;
    launch.master_port = port;
    launch.args = {"--max_mib=" + max_mib};
    absl::Status s = zerotrain::comm::LaunchRanks(launch);
    if (!s.ok()) {
      std::fprintf(stderr, "comm_bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    port += 2;
  }
  return 0;
}
