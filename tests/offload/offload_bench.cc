// offload_bench: what offload (cpu = ZeRO-Offload, nvme = ZeRO-Infinity; at stage 3 both the
// optimizer state and the parameter shard, with a live budget of 1e7 elements) costs and buys,
// as markdown tables (docs/BENCHMARKS.md): 1. step time, peak RSS and state bytes of a GPT (fp32
// AdamW) at stages 2 and 3 x offload none/cpu/nvme; 2. the disk's sequential throughput next to a
// SubGroupStore swapping the same bytes (target: ratio >= 0.70); 3. the largest GPT (n_layer at
// n_embd 512) stage 2 / 3 / 3+cpu / 3+nvme train while a memory cgroup caps all ranks together;
// 4 (only when asked for): where stage 3 + nvme peaks at --layers of n_embd 512, by phase.
//   bazel run -c opt //tests/offload:offload_bench [-- --world=2 --steps=5 --layers=8 --embd=512
//     --sub_group=4194304 --nvme_dir=/tmp --io_mib=1024 --cap_mib=3072 --max_layers=96
//     --checkpoint_every=0 --only=1,2,3 (or 4) --fit=2,3,3cpu,3nvme]
// --checkpoint_every=k recomputes every k-th block's activations in backward (recompute/), in
// every configuration; --fit picks table 3's configurations.
// Each row is its own LaunchRanks of this binary (--role=step|fit|phases), so a rank's peak RSS
// belongs to one configuration. Table 1 runs first because a rank's ru_maxrss starts at the
// launcher's peak (posix_spawn shares the launcher's memory until exec). Swap files go in a fresh
// directory under --nvme_dir ($TMPDIR or /tmp by default), removed at the end.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "comm/comm.h"
#include "comm/launcher.h"
#include "engine/engine.h"
#include "engine/tensor_memory.h"
#include "engine/zero_init.h"
#include "models/gpt.h"
#include "offload/pinned_host_pool.h"
#include "offload/sub_group_store.h"
#include "offload/swap_file.h"
#include "offload/swap_space.h"
#include "tools/status_macros.h"
#include "trainer/memory_cgroup.h"

namespace zerotrain::trainer {
namespace {

using ll = long long;
constexpr int64_t kMicro = 4, kSeq = 128, kFitEmbd = 512, kMiB = 1 << 20;
const std::vector<std::string> kOffloads = {"none", "cpu", "nvme"};

struct Flags {  // --stage, --offload, --role: what the driver tells a rank
  int64_t world = 2, steps = 5, layers = 8, embd = 512, sub_group = int64_t{1} << 22, io_mib = 1024,
          cap_mib = 3072, max_layers = 96, stage = 2, checkpoint_every = 0;
  std::string nvme_dir, only = "1,2,3", offload = "none", role;
  std::string fit = "2,3,3cpu,3nvme";  // table 3's configurations
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::map<std::string, int64_t*> ints = {
      {"world", &f.world},         {"steps", &f.steps},
      {"layers", &f.layers},       {"embd", &f.embd},
      {"sub_group", &f.sub_group}, {"io_mib", &f.io_mib},
      {"cap_mib", &f.cap_mib},     {"max_layers", &f.max_layers},
      {"stage", &f.stage},         {"checkpoint_every", &f.checkpoint_every}};
  std::map<std::string, std::string*> strings = {{"nvme_dir", &f.nvme_dir},
                                                 {"only", &f.only},
                                                 {"offload", &f.offload},
                                                 {"role", &f.role},
                                                 {"fit", &f.fit}};
  std::vector<std::string> unknown;
  for (int i = 1; i < argc; ++i) {
    std::vector<std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    const std::string key = absl::StartsWith(kv[0], "--") ? kv[0].substr(2) : "";
    if (kv.size() == 2 && ints.count(key) &&
        !(absl::SimpleAtoi(kv[1], ints[key]) && *ints[key] > 0))
      return absl::InvalidArgumentError(absl::StrCat(argv[i], ": not a positive integer"));
    if (kv.size() == 2 && strings.count(key)) *strings[key] = kv[1];
    if (kv.size() != 2 || !(ints.count(key) || strings.count(key))) unknown.push_back(argv[i]);
  }
  if (!unknown.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flags: ", absl::StrJoin(unknown, " "),
                     " (flags: --world --steps --layers --embd "
                     "--sub_group --nvme_dir --io_mib --cap_mib --max_layers --checkpoint_every "
                     "--only=1,2,3,4 --fit=2,3,3cpu,3nvme)"));
  for (absl::string_view t : absl::StrSplit(f.only, ','))
    if (t != "1" && t != "2" && t != "3" && t != "4")
      return absl::InvalidArgumentError(absl::StrCat("--only=", f.only, ": tables are 1-4"));
  if (f.stage < 2 || f.stage > 3 || std::count(kOffloads.begin(), kOffloads.end(), f.offload) == 0)
    return absl::InvalidArgumentError("--stage is 2 or 3, --offload none, cpu or nvme");
  return f;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

models::GptOptions Model(int64_t layers, int64_t embd) {
  models::GptOptions g;
  g.n_layer = layers, g.n_embd = embd, g.n_head = 8, g.block_size = kSeq, g.vocab_size = 256;
  return g;
}

// ---- A rank: the GPT and its engine; 2 steps, then (role=step, phases) --steps more and a row.

struct Run {
  std::unique_ptr<engine::ZeroInit> init;  // stage 3; outlives the engine
  std::shared_ptr<models::Gpt> model;
  std::unique_ptr<engine::Engine> engine;
  double construction_mib = 0, create_mib = 0;  // peak RSS of each (role=phases)
};

// The peak RSS (VmHWM) since the process started or the last call, in MiB; the kernel's peak is
// reset after reading it (clear_refs 5), so each call sees one phase.
double PhasePeakMiB() {
  std::ifstream status("/proc/self/status");
  double kib = 0;
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "VmHWM:")) kib = std::strtod(line.c_str() + 6, nullptr);
  }
  std::ofstream("/proc/self/clear_refs") << "5";
  return kib / 1024;
}

absl::Status Build(const Flags& f, comm::ProcessGroup* group, Run& r) {
  engine::EngineOptions o;
  o.stage = static_cast<int>(f.stage);
  o.train_micro_batch_size_per_gpu = kMicro;
  o.reduce_bucket_size = o.allgather_bucket_size = 1 << 22;
  o.sub_group_size = f.sub_group;
  o.offload_optimizer.device = f.offload == "cpu"    ? engine::OffloadDevice::kCpu
                               : f.offload == "nvme" ? engine::OffloadDevice::kNvme
                                                     : engine::OffloadDevice::kNone;
  o.offload_optimizer.nvme_path = f.nvme_dir;
  o.offload_optimizer.buffer_count = 4;
  if (o.stage == 3) {
    // ZeRO-Infinity's shape: the parameter shard goes where the optimizer state goes (nothing
    // kept in host memory with nvme), and a bounded live budget, without which a whole model's
    // worth of gathered parameters would sit in memory from forward into backward.
    o.offload_param.device = o.offload_optimizer.device;
    o.offload_param.nvme_path = f.nvme_dir;
    o.offload_param.max_in_cpu = 0;
    o.stage3.max_live_numel = 10000000;
    o.stage3.prefetch_numel = 5000000;
  }
  models::GptOptions g = Model(f.layers, f.embd);
  g.checkpoint_every = f.checkpoint_every;  // recompute/: block activations rebuilt in backward
  absl::Status partitioned;
  if (o.stage == 3) {  // partitioned while it is built, as training_run.cc does: never whole
    // As //trainer:main does: with the shard on NVMe, its slices go there as they are cut.
    ZT_ASSIGN_OR_RETURN(r.init, engine::ZeroInit::Create(group, &o));
    g.after_submodule = [&](const std::string&, torch::nn::Module& m) {
      if (partitioned.ok()) partitioned = r.init->Partition(m);
    };
  }
  // As //trainer:main does: the model's large blocks are mapped by the counter too, so what
  // ShardedInit frees (each submodule's full values) goes back rather than into glibc's heaps.
  engine::InstallCpuTensorCounter();
  torch::manual_seed(0);
  ZT_ASSIGN_OR_RETURN(r.model, models::MakeGpt(g));
  ZT_RETURN_IF_ERROR(partitioned);
  r.construction_mib = PhasePeakMiB();
  ZT_ASSIGN_OR_RETURN(r.engine, engine::Engine::Create(*r.model, o, group));
  r.create_mib = PhasePeakMiB();
  return absl::OkStatus();
}

absl::Status TrainStep(Run& r) {  // a c10::Error from forward lands in main's catch
  at::Tensor x = torch::randint(0, 256, {kMicro, kSeq}), y = torch::randint(0, 256, {kMicro, kSeq});
  at::Tensor loss;
  {
    auto scope = r.engine->BeginForward();
    loss = models::GptLoss(r.model->forward(x), y);
  }
  ZT_RETURN_IF_ERROR(r.engine->Backward(loss));
  return r.engine->Step();
}

absl::Status RankMain(const Flags& f) {
  if (f.role == "fit") std::ofstream("/proc/self/oom_score_adj") << "500";  // OOM: a rank, not us
  ZT_ASSIGN_OR_RETURN(comm::RendezvousInfo info, comm::RendezvousFromEnv());
  ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(info, {}));
  Run r;
  ZT_RETURN_IF_ERROR(Build(f, group.get(), r));
  std::vector<double> ms;
  for (int64_t i = 0; i < 2 + (f.role == "fit" ? 0 : f.steps); ++i) {
    ZT_RETURN_IF_ERROR(group->Barrier());
    const double start = Now();
    ZT_RETURN_IF_ERROR(TrainStep(r));
    ZT_RETURN_IF_ERROR(group->Barrier());
    if (i >= 2) ms.push_back(1e3 * (Now() - start));
  }
  if (f.role == "phases") {
    at::Tensor peaks = at::tensor({r.construction_mib, r.create_mib, PhasePeakMiB()}, at::kDouble);
    ZT_RETURN_IF_ERROR(group->AllReduce(peaks, comm::ReduceOp::kMax));
    const double* p = peaks.data_ptr<double>();
    if (group->rank() == 0) {
      std::printf("| %lld | %lld | %.0f | %.0f | %.0f |\n", (ll)f.layers,
                  (ll)models::GptParameterCount(Model(f.layers, f.embd)), p[0], p[1], p[2]);
    }
    return absl::OkStatus();
  }
  if (f.role != "step") return absl::OkStatus();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  at::Tensor rss = at::full({1}, usage.ru_maxrss / 1024.0, at::kDouble);  // KiB -> MiB
  ZT_RETURN_IF_ERROR(group->AllReduce(rss, comm::ReduceOp::kMax));
  if (group->rank() != 0) return absl::OkStatus();
  std::sort(ms.begin(), ms.end());
  const engine::ModelStateBytes b = r.engine->model_state_bytes();
  std::printf("| %lld | %s | %.1f | %.0f | %.1f | %.1f | %.1f |\n", (ll)f.stage, f.offload.c_str(),
              ms[ms.size() / 2], rss.item<double>(), b.total() / double(kMiB),
              b.offloaded_host / double(kMiB), b.offloaded_nvme / double(kMiB));
  std::fflush(stdout);
  return absl::OkStatus();
}

// ---- The driver.

absl::Status Launch(const Flags& f, const std::string& role, int stage, const std::string& offload,
                    int64_t layers, int64_t embd, const std::string& dir) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);  // a port the kernel just found free
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), len);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  comm::LaunchOptions lo;
  lo.nproc_per_node = static_cast<int>(f.world);
  lo.master_port = ntohs(a.sin_port) != 0 ? ntohs(a.sin_port) : 29760;
  lo.args = {"--role=" + role,
             absl::StrCat("--stage=", stage),
             "--offload=" + offload,
             absl::StrCat("--layers=", layers),
             absl::StrCat("--embd=", embd),
             absl::StrCat("--steps=", f.steps),
             absl::StrCat("--sub_group=", f.sub_group),
             "--nvme_dir=" + dir};
  if (f.checkpoint_every > 0)
    lo.args.push_back(absl::StrCat("--checkpoint_every=", f.checkpoint_every));
  return comm::LaunchRanks(lo);
}

std::string OneLine(const absl::Status& s) {  // short, and safe in a markdown cell
  std::string m(s.message().substr(0, 160));
  std::replace(m.begin(), m.end(), '\n', ' ');
  std::replace(m.begin(), m.end(), '|', '/');
  return m;
}

absl::Status Table1(const Flags& f, const std::string& dir) {
  std::printf(
      "## 1. Step time: GPT n_layer %lld, n_embd %lld, 8 heads, block %lld, vocab 256 "
      "(%lld parameters), fp32 AdamW, %lld ranks, micro batch %lld, sub_group %lld, "
      "buffer_count 4; median of %lld steps after 2 warm-up; MiB per rank (rank 0's; RSS: "
      "max over ranks)\n\n| stage | offload | step ms | peak RSS MiB | model state MiB | "
      "offloaded host MiB | offloaded nvme MiB |\n|---|---|---|---|---|---|---|\n",
      (ll)f.layers, (ll)f.embd, (ll)kSeq, (ll)models::GptParameterCount(Model(f.layers, f.embd)),
      (ll)f.world, (ll)kMicro, (ll)f.sub_group, (ll)f.steps);
  std::fflush(stdout);
  absl::Status first;
  for (int stage : {2, 3}) {
    for (const std::string& offload : kOffloads) {
      absl::Status s = Launch(f, "step", stage, offload, f.layers, f.embd, dir);
      if (!s.ok())
        std::printf("| %d | %s | failed: %s |\n", stage, offload.c_str(), OneLine(s).c_str());
      first.Update(s);
    }
  }
  return first;
}

struct Rate {
  double write = 0, read = 0;  // MiB/s
};

// One sequential stream of 1 MiB pwrite/pread on a preallocated file (as SwapFile preallocates).
absl::StatusOr<Rate> DiskRate(const std::string& dir, int64_t mib, bool* direct) {
  const std::string path = dir + "/disk_probe";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  const int err = fd < 0 ? errno : posix_fallocate(fd, 0, mib * kMiB);
  if (fd >= 0) close(fd);
  if (err != 0)
    return absl::InternalError(absl::StrCat("creating ", path, ": ", std::strerror(err)));
  fd = open(path.c_str(), O_RDWR | O_DIRECT);
  if (!(*direct = fd >= 0)) fd = open(path.c_str(), O_RDWR);  // e.g. tmpfs refuses O_DIRECT
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  std::unique_ptr<void, void (*)(void*)> buf(std::aligned_alloc(4096, kMiB), std::free);
  std::memset(buf.get(), 0x5a, kMiB);
  auto pass = [&](bool write) -> absl::StatusOr<double> {
    const double start = Now();
    for (int64_t i = 0; i < mib; ++i) {
      const ssize_t n =
          write ? pwrite(fd, buf.get(), kMiB, i * kMiB) : pread(fd, buf.get(), kMiB, i * kMiB);
      if (n != kMiB)
        return absl::InternalError(absl::StrCat(write ? "pwrite " : "pread ", path, " at MiB ", i,
                                                ": ", std::strerror(errno)));
    }
    if (write && !*direct) fdatasync(fd);
    return mib / (Now() - start);
  };
  // The first write converts the preallocated extents; time the second, as for the store.
  absl::StatusOr<double> w = pass(true), r = w;
  if (w.ok()) w = pass(true);
  if (w.ok() && !*direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // read the disk
  if (w.ok()) r = pass(false);
  close(fd);
  unlink(path.c_str());
  if (!r.ok()) return r.status();
  return Rate{*w, *r};
}

// The same bytes as three arrays (master, exp_avg, exp_avg_sq) in a SubGroupStore on NVMe.
absl::StatusOr<Rate> SwapRate(const std::string& dir, int64_t mib, int64_t sub_group,
                              std::string* mode) {
  ZT_ASSIGN_OR_RETURN(offload::PinnedHostPool pool, offload::PinnedHostPool::Create({}));
  offload::SwapSpaceOptions sw;
  sw.directory = dir;
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<offload::SwapSpace> swap, offload::SwapSpace::Create(sw));
  offload::SubGroupStoreOptions so;
  so.arrays = {"master", "exp_avg", "exp_avg_sq"};
  so.numel = mib * kMiB / 12;
  so.sub_group_numel = std::min(sub_group, so.numel);
  so.device = offload::StoreDevice::kNvme;
  so.pool = &pool, so.swap = swap.get(), so.region_prefix = "bench.", so.buffer_count = 4;
  ZT_ASSIGN_OR_RETURN(auto store, offload::SubGroupStore::Create(so));
  auto noop = [](const offload::SubGroupView&) { return absl::OkStatus(); };
  // Untimed, as for the disk; filling the buffers faults them in, as an optimizer step would.
  ZT_RETURN_IF_ERROR(store->VisitAll(offload::Access::kWrite, [](const offload::SubGroupView& v) {
    for (size_t k = 0; k < v.arrays.size(); ++k)
      std::fill(v.floats(k), v.floats(k) + v.numel, 1.0f);
    return absl::OkStatus();
  }));
  Rate rate;
  for (double* out : {&rate.write, &rate.read}) {
    const double start = Now();
    ZT_RETURN_IF_ERROR(store->VisitAll(
        out == &rate.write ? offload::Access::kWrite : offload::Access::kRead, noop));
    *out = so.numel * 12.0 / kMiB / (Now() - start);
  }
  *mode = offload::IoModeName(swap->mode());
  return rate;
}

// ", activations recomputed every k blocks", when --checkpoint_every asks for it.
std::string RecomputeNote(const Flags& f) {
  if (f.checkpoint_every == 0) return "";
  return absl::StrCat(", activations recomputed every ", f.checkpoint_every, " blocks");
}

// One stage 3 + nvme run at --layers: which phase sets a rank's peak.
absl::Status Table4(const Flags& f, const std::string& dir) {
  std::printf(
      "\n## 4. Peak RSS by phase, stage 3 + nvme (n_embd %lld, 8 heads, block %lld; fp32 AdamW, "
      "%lld ranks, micro batch %lld%s; the larger rank's VmHWM, reset between phases)\n\n"
      "| n_layer | parameters | construction (ShardedInit) MiB | Engine::Create MiB | %lld steps "
      "MiB |\n|---|---|---|---|---|\n",
      (ll)kFitEmbd, (ll)kSeq, (ll)f.world, (ll)kMicro, RecomputeNote(f).c_str(), (ll)(2 + f.steps));
  std::fflush(stdout);
  return Launch(f, "phases", 3, "nvme", f.layers, kFitEmbd, dir);
}

// Three rounds, disk and swap taking turns so that drift on a shared disk hits both alike; the
// median of each column and of each ratio.
absl::Status Table2(const Flags& f, const std::string& dir) {
  bool direct = false;
  std::string mode;
  std::vector<Rate> disk, swap;
  for (int round = 0; round < 3; ++round) {
    ZT_ASSIGN_OR_RETURN(Rate d, DiskRate(dir, f.io_mib, &direct));
    ZT_ASSIGN_OR_RETURN(Rate w, SwapRate(dir, f.io_mib, f.sub_group, &mode));
    disk.push_back(d);
    swap.push_back(w);
  }
  std::printf(
      "\n## 2. NVMe throughput: %lld MiB in %s; disk: one stream of 1 MiB transfers, %s; "
      "swap: SubGroupStore (3 arrays, sub_group %lld, buffer_count 4, default aio), %s; "
      "3 rounds; target ratio >= 0.70\n\n| round | disk write MiB/s | disk read MiB/s | "
      "swap write MiB/s (ratio) | swap read MiB/s (ratio) |\n|---|---|---|---|---|\n",
      (ll)f.io_mib, dir.c_str(),
      direct ? "O_DIRECT" : "buffered (O_DIRECT refused; cache dropped before the read)",
      (ll)f.sub_group, mode.c_str());
  std::vector<double> columns[6];
  for (int r = 0; r < 3; ++r) {
    const double row[6] = {disk[r].write, disk[r].read,
                           swap[r].write, swap[r].write / disk[r].write,
                           swap[r].read,  swap[r].read / disk[r].read};
    for (int c = 0; c < 6; ++c) columns[c].push_back(row[c]);
    std::printf("| %d | %.0f | %.0f | %.0f (%.2f) | %.0f (%.2f) |\n", r + 1, row[0], row[1], row[2],
                row[3], row[4], row[5]);
  }
  double median[6];
  for (int c = 0; c < 6; ++c) {
    std::sort(columns[c].begin(), columns[c].end());
    median[c] = columns[c][1];
  }
  std::printf("| median | %.0f | %.0f | %.0f (%.2f) | %.0f (%.2f) |\n", median[0], median[1],
              median[2], median[3], median[4], median[5]);
  std::fflush(stdout);
  return absl::OkStatus();
}

// ---- Table 3: a memory cgroup the driver enters around LaunchRanks, so that the ranks inherit it.

struct Fit {
  int64_t largest = 0, failed = 0;  // failed 0: none up to --max_layers
  std::string how;
};

// Doubles n_layer from 2 until a trial fails, then bisects between the last success and it.
absl::StatusOr<Fit> Largest(const Flags& f, const MemoryCgroup& cap, int stage,
                            const std::string& offload, const std::string& dir) {
  Fit fit;
  auto trial = [&](int64_t layers) -> absl::StatusOr<bool> {
    const int64_t kills = cap.OomKills();
    ZT_RETURN_IF_ERROR(cap.Enter());
    const absl::Status s = Launch(f, "fit", stage, offload, layers, kFitEmbd, dir);
    if (absl::Status back = cap.Leave(); !back.ok()) {
      std::fprintf(stderr, "offload_bench: %s\n", std::string(back.message()).c_str());
      std::exit(1);  // the driver is stuck in the capped cgroup: stop here
    }
    if (absl::IsCancelled(s) || absl::IsInvalidArgument(s)) return s;  // Ctrl-C; bad options
    // The rank the launcher names may be the one whose peer the OOM killer took.
    const std::string how =
        absl::StrCat(cap.OomKills() > kills ? "OOM kill in the cgroup; " : "", OneLine(s));
    std::fprintf(stderr, "  stage %d, offload %s, n_layer %lld: %s\n", stage, offload.c_str(),
                 (ll)layers, s.ok() ? "trained" : how.c_str());
    if (s.ok()) fit.largest = std::max(fit.largest, layers);
    if (!s.ok() && (fit.failed == 0 || layers < fit.failed)) {
      fit.failed = layers;
      fit.how = how;
    }
    return s.ok();
  };
  for (int64_t n = std::min<int64_t>(2, f.max_layers);; n = std::min(2 * n, f.max_layers)) {
    ZT_ASSIGN_OR_RETURN(bool ok, trial(n));
    if (!ok || n == f.max_layers) break;
  }
  while (fit.failed > 0 && fit.failed - fit.largest > 1)
    ZT_RETURN_IF_ERROR(trial((fit.largest + fit.failed) / 2).status());
  return fit;
}

absl::Status Table3(const Flags& f, const std::string& dir) {
  absl::StatusOr<std::unique_ptr<MemoryCgroup>> cap = MemoryCgroup::Create(f.cap_mib * kMiB);
  if (!cap.ok()) {
    std::printf("\n## 3. Largest model under a memory cap: skipped: %s\n",
                OneLine(cap.status()).c_str());
    return absl::OkStatus();
  }
  std::printf(
      "\n## 3. Largest GPT (n_embd %lld, 8 heads, block %lld, vocab 256; fp32 AdamW, "
      "%lld ranks, micro batch %lld%s) that runs Engine::Create + 2 steps with all ranks "
      "capped at %lld MiB together (%s)\n\n| config | largest n_layer | parameters | "
      "first failing n_layer | how it failed |\n|---|---|---|---|---|\n",
      (ll)kFitEmbd, (ll)kSeq, (ll)f.world, (ll)kMicro, RecomputeNote(f).c_str(), (ll)f.cap_mib,
      (*cap)->description().c_str());
  std::fflush(stdout);
  const std::vector<std::string> fits = absl::StrSplit(f.fit, ',');
  for (auto [stage, offload] :
       {std::pair<int, std::string>{2, "none"}, {3, "none"}, {3, "cpu"}, {3, "nvme"}}) {
    const std::string name = absl::StrCat(stage, offload == "none" ? "" : offload);
    if (std::find(fits.begin(), fits.end(), name) == fits.end()) continue;
    ZT_ASSIGN_OR_RETURN(Fit fit, Largest(f, **cap, stage, offload, dir));
    std::printf("| stage %d%s | %lld | %lld | %s | %s |\n", stage,
                offload == "none" ? "" : (", offload " + offload).c_str(), (ll)fit.largest,
                fit.largest > 0 ? (ll)models::GptParameterCount(Model(fit.largest, kFitEmbd)) : 0LL,
                fit.failed > 0 ? std::to_string(fit.failed).c_str()
                               : absl::StrCat("none up to ", f.max_layers).c_str(),
                fit.how.c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status Drive(const Flags& f) {
  if (absl::Status s = models::ValidateGptOptions(Model(f.layers, f.embd)); !s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--layers=", f.layers, " --embd=", f.embd, " (8 heads): ", s.message()));
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(!f.nvme_dir.empty() ? f.nvme_dir
                                 : tmp != nullptr    ? tmp
                                                     : "/tmp",
                                 "/zt_offload_bench_XXXXXX");
  if (mkdtemp(dir.data()) == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("--nvme_dir: cannot create ", dir, ": ", std::strerror(errno)));
  absl::Status result;
  if (absl::StrContains(f.only, "1")) result.Update(Table1(f, dir));
  if (absl::StrContains(f.only, "2")) result.Update(Table2(f, dir));
  if (absl::StrContains(f.only, "3")) result.Update(Table3(f, dir));
  if (absl::StrContains(f.only, "4")) result.Update(Table4(f, dir));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

}  // namespace
}  // namespace zerotrain::trainer

int main(int argc, char** argv) {
  using namespace zerotrain;
  absl::StatusOr<trainer::Flags> flags = trainer::ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "offload_bench: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  const char* rank = std::getenv("RANK");
  if (rank != nullptr) comm::DieWithLauncher();
  absl::Status s;
  try {
    s = rank != nullptr ? trainer::RankMain(*flags) : trainer::Drive(*flags);
  } catch (const c10::Error& e) {
    s = absl::InternalError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    s = absl::InternalError(e.what());
  }
  if (s.ok()) return 0;
  const std::string message =
      absl::StrCat(rank != nullptr ? absl::StrCat("rank ", rank, ": ") : "", s.message());
  if (rank != nullptr) comm::ReportRankError(message);
  std::fprintf(stderr, "offload_bench: %s\n", message.c_str());
  return 1;
}
