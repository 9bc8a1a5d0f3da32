// Optimizer offload's accounting and its failures, on 2 ranks. Accounting: with cpu the engine
// reports no master weights or optimizer states with the model and 12 Psi / N bytes in host
// memory; with nvme the host holds only buffer_count sub-group buffers and the swap files the
// rest. Faults, made for real: a missing nvme_path, a file-size limit that stops the swap files
// from being preallocated, and a swap file truncated between two steps; each is a clear error on
// every rank (no hang), and a truncation mid-run leaves the last checkpoint loadable and writes
// no new one, and the failed engine itself recovers by loading it. With offload_param nvme, a
// truncated parameter swap file fails the next forward naming the file, and the other rank
// fails within the group's timeout.
#include <sys/resource.h>
#include <unistd.h>

#include <ATen/core/Tensor.h>

#include <csignal>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;
using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/offload_faults_", name);
}

EngineOptions Options(int stage, OffloadDevice device, const std::string& nvme_dir) {
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = 4;
  o.precision = Precision::kBFloat16;
  o.reduce_bucket_size = 64;
  o.stage3.persistence_threshold = 0;
  o.offload_optimizer.device = device;
  o.offload_optimizer.nvme_path = nvme_dir;
  o.offload_optimizer.buffer_count = 2;
  o.sub_group_size = 100;
  return o;
}

absl::Status Train(Engine& engine, testing::TestNet& net, int steps) {
  return testing::TrainSteps(engine, net, ModelKind::kMlp, steps, 2);
}

absl::Status Expect(const absl::Status& s, const std::string& word, const std::string& what) {
  if (s.ok()) return absl::InternalError(absl::StrCat(what, ": no error"));
  if (s.message().find(word) == std::string::npos) {
    return absl::InternalError(absl::StrCat(what, ": error lacks '", word, "': ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckAccounting(comm::ProcessGroup* group, int stage) {
  const std::string nvme = TestDir(absl::StrCat("acct_", group->rank()));
  std::filesystem::create_directories(nvme);
  const int64_t array_bytes_per_elem = 4 * 3;  // fp32 master, exp_avg, exp_avg_sq
  for (OffloadDevice device : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    auto net = testing::MakeNet(ModelKind::kMlp);
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, Options(stage, device, nvme), group));
    ZT_RETURN_IF_ERROR(Train(*engine, *net, 1));
    const ModelStateBytes b = engine->model_state_bytes();
    ZT_ASSIGN_OR_RETURN(at::Tensor master, engine->MasterCopy());
    const int64_t psi = engine->flat_params().layout().padded_numel();
    const int64_t want = array_bytes_per_elem * psi / group->world_size();
    const std::string what =
        absl::StrCat("stage ", stage, " ", OffloadDeviceName(device), ": ", b.ToString());
    if (b.master != 0 || b.optimizer_states != 0 || master.numel() * 12 != want) {
      return absl::InternalError(absl::StrCat(what, "; want 12 Psi / N = ", want));
    }
    // Each array's block is rounded up to a 4 KiB page by the pool.
    if (device == OffloadDevice::kCpu &&
        (b.offloaded_host < want || b.offloaded_host >= want + 3 * 4096 || b.offloaded_nvme != 0)) {
      return absl::InternalError(absl::StrCat(what, "; want host ", want, " + < 3 pages"));
    }
    // Stages 2 and 3 keep the fp32 gradient shard with the state on NVMe, none in memory; stage 1's
    // gradients are whole, in memory.
    const bool grads_on_nvme = device == OffloadDevice::kNvme && stage >= 2;
    if (grads_on_nvme != (b.grads == 0)) {
      return absl::InternalError(
          absl::StrCat(what, "; want the gradients ", grads_on_nvme ? "on NVMe" : "in memory"));
    }
    // Two buffers of one 100-element sub-group of three arrays (and two of its gradients), each
    // rounded to a 4 KiB page.
    const int64_t want_nvme = want + (grads_on_nvme ? 4 * psi / group->world_size() : 0);
    const int64_t most_host = (grads_on_nvme ? 4 : 2) * 4096;
    if (device == OffloadDevice::kNvme &&
        (b.offloaded_nvme != want_nvme || b.offloaded_host <= 0 || b.offloaded_host > most_host)) {
      return absl::InternalError(
          absl::StrCat(what, "; want nvme ", want_nvme, ", host <= ", most_host));
    }
  }
  return absl::OkStatus();
}

// Stage 3 parameter offload: the shard leaves the model's bytes for host memory (cpu) or the swap
// files (nvme, no part kept in host memory).
absl::Status CheckParamAccounting(comm::ProcessGroup* group) {
  const std::string nvme = TestDir(absl::StrCat("pacct_", group->rank()));
  std::filesystem::create_directories(nvme);
  int64_t with_model = 0;
  for (OffloadDevice param : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    auto net = testing::MakeNet(ModelKind::kMlp);
    EngineOptions o = Options(3, OffloadDevice::kNone, nvme);
    o.offload_param.device = param;
    o.offload_param.nvme_path = nvme;
    o.offload_param.max_in_cpu = 0;
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group));
    ZT_RETURN_IF_ERROR(Train(*engine, *net, 1));
    const ModelStateBytes b = engine->model_state_bytes();
    const int64_t shard = 2 * engine->flat_params().layout().padded_numel() / group->world_size();
    const std::string what =
        absl::StrCat("offload_param ", OffloadDeviceName(param), ": ", b.ToString());
    if (param == OffloadDevice::kNone) {
      with_model = b.params;
      if (b.params != shard || b.offloaded_host != 0) return absl::InternalError(what);
    } else if (b.params != 0 ||
               (param == OffloadDevice::kCpu &&
                (b.offloaded_host < shard || b.offloaded_host >= shard + 4096)) ||
               (param == OffloadDevice::kNvme &&
                (b.offloaded_host != 0 || b.offloaded_nvme != shard))) {
      return absl::InternalError(absl::StrCat(what, "; the shard is ", shard, " B"));
    }
  }
  return with_model > 0 ? absl::OkStatus() : absl::InternalError("no shard bytes");
}

TEST(OffloadAccounting, HostAndNvmeBytes) {
  auto outcomes = SpawnRanks(2, [](int) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    for (int stage : {1, 2, 3}) ZT_RETURN_IF_ERROR(CheckAccounting(group.get(), stage));
    ZT_RETURN_IF_ERROR(CheckParamAccounting(group.get()));
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// Rank 0's swap directory is missing, then rank 0 may not create files over 1 KiB: Create fails
// on both ranks, rank 0 naming the path or the file.
absl::Status StartFaults(comm::ProcessGroup* group) {
  const int rank = group->rank();
  const std::string ok_dir = TestDir(absl::StrCat("start_", rank));
  std::filesystem::create_directories(ok_dir);
  const std::string missing = TestDir("no_such_dir");
  auto net = testing::MakeNet(ModelKind::kMlp);
  auto e =
      Engine::Create(*net, Options(2, OffloadDevice::kNvme, rank == 0 ? missing : ok_dir), group);
  ZT_RETURN_IF_ERROR(Expect(e.status(), rank == 0 ? missing : "rank(s) 0 failed", "missing dir"));
  struct rlimit old;
  getrlimit(RLIMIT_FSIZE, &old);
  if (rank == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {1024, old.rlim_max};
    setrlimit(RLIMIT_FSIZE, &small);
  }
  auto net2 = testing::MakeNet(ModelKind::kMlp);
  EngineOptions o = Options(2, OffloadDevice::kNvme, ok_dir);
  o.sub_group_size = 1 << 20;  // one sub-group: its file is a 4 KiB page at least
  auto e2 = Engine::Create(*net2, o, group);
  if (rank == 0) setrlimit(RLIMIT_FSIZE, &old);
  return Expect(e2.status(), rank == 0 ? ".swp" : "rank(s) 0 failed", "file size limit");
}

TEST(OffloadFaults, BadNvmePathFailsAtCreate) {
  auto outcomes = SpawnRanks(2, [](int) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    ZT_RETURN_IF_ERROR(StartFaults(group.get()));
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// The first swap file under nvme_dir whose name ends in `suffix`: the state's ".sg0.swp" (not its
// gradients', which the next backward rewrites whole before anything reads them), a parameter
// part's ".p0.swp".
absl::StatusOr<std::string> SwapFileOf(const std::string& nvme_dir, const std::string& suffix) {
  for (const auto& d : std::filesystem::recursive_directory_iterator(nvme_dir)) {
    if (absl::EndsWith(d.path().filename().string(), suffix)) {
      return d.path().string();
    }
  }
  return absl::NotFoundError(absl::StrCat("no swap file '*", suffix, "' under ", nvme_dir));
}

absl::Status TruncatedMidRun(comm::ProcessGroup* group) {
  const int rank = group->rank();
  const std::string nvme = TestDir(absl::StrCat("trunc_", rank));
  const std::string ckpt = TestDir("trunc_ckpt");
  std::filesystem::create_directories(nvme);
  auto net = testing::MakeNet(ModelKind::kMlp);
  ZT_ASSIGN_OR_RETURN(auto engine,
                      Engine::Create(*net, Options(2, OffloadDevice::kNvme, nvme), group));
  ZT_RETURN_IF_ERROR(Train(*engine, *net, 3));
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(ckpt, "good"));
  ZT_ASSIGN_OR_RETURN(at::Tensor saved, engine->MasterCopy());
  ZT_RETURN_IF_ERROR(group->Barrier());
  if (rank == 0) {
    ZT_ASSIGN_OR_RETURN(std::string file, SwapFileOf(nvme, ".sg0.swp"));
    std::filesystem::resize_file(file, 100);
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  ZT_RETURN_IF_ERROR(Expect(Train(*engine, *net, 1), rank == 0 ? ".swp" : "rank(s) 0 failed",
                            "step after truncation"));
  ZT_RETURN_IF_ERROR(
      Expect(engine->SaveCheckpoint(ckpt, "bad"), "inconsistent", "save after the failure"));
  if (std::filesystem::exists(absl::StrCat(ckpt, "/bad"))) {
    return absl::InternalError("the refused save left a directory behind");
  }
  // The broken engine itself recovers by loading: the load rewrites every swapped sub-group.
  ZT_RETURN_IF_ERROR(engine->LoadCheckpoint(ckpt).status());
  ZT_ASSIGN_OR_RETURN(at::Tensor reloaded, engine->MasterCopy());
  if (!at::equal(reloaded, saved)) return absl::InternalError("the reload differs from the save");
  ZT_RETURN_IF_ERROR(Train(*engine, *net, 1));
  auto fresh_net = testing::MakeNet(ModelKind::kMlp);
  ZT_ASSIGN_OR_RETURN(auto fresh,
                      Engine::Create(*fresh_net, Options(2, OffloadDevice::kNone, ""), group));
  ZT_RETURN_IF_ERROR(fresh->LoadCheckpoint(ckpt).status());
  ZT_ASSIGN_OR_RETURN(at::Tensor loaded, fresh->MasterCopy());
  if (!at::equal(loaded, saved)) return absl::InternalError("the good checkpoint changed");
  return Train(*fresh, *fresh_net, 1);
}

TEST(OffloadFaults, TruncatedSwapFileStopsEveryRankAndKeepsTheCheckpoint) {
  auto outcomes = SpawnRanks(2, [](int) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    ZT_RETURN_IF_ERROR(TruncatedMidRun(group.get()));
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

absl::Status TruncatedParamFile(comm::ProcessGroup* group) {
  const int rank = group->rank();
  const std::string nvme = TestDir(absl::StrCat("ptrunc_", rank));
  std::filesystem::create_directories(nvme);
  auto net = testing::MakeNet(ModelKind::kMlp);
  EngineOptions o = Options(3, OffloadDevice::kNone, nvme);
  o.offload_param.device = OffloadDevice::kNvme;
  o.offload_param.nvme_path = nvme;
  o.offload_param.max_in_cpu = 0;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group));
  ZT_RETURN_IF_ERROR(Train(*engine, *net, 2));
  ZT_RETURN_IF_ERROR(group->Barrier());
  if (rank == 0) {
    ZT_ASSIGN_OR_RETURN(std::string file, SwapFileOf(nvme, ".p0.swp"));
    std::filesystem::resize_file(file, 0);
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  absl::Status s;
  try {
    s = Train(*engine, *net, 1);
  } catch (const c10::Error& e) {  // the forward's operator reports the failed gather
    s = absl::InternalError(e.what_without_backtrace());
  }
  // Rank 0 names the file the forward's gather could not read; rank 1 fails (its next
  // collective finds rank 0 gone or times out), whatever the message.
  if (rank == 0) ZT_RETURN_IF_ERROR(Expect(s, "from its shard", "the forward after truncation"));
  return Expect(s, rank == 0 ? ".swp" : "", "step after truncating a parameter file");
}

TEST(OffloadFaults, TruncatedParameterFileFailsTheForward) {
  auto outcomes = SpawnRanks(2, [](int) -> absl::StatusOr<std::string> {
    comm::GroupOptions go;
    go.timeout = std::chrono::seconds(5);  // rank 1 fails on the collective rank 0 never joins
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv(go));
    ZT_RETURN_IF_ERROR(TruncatedParamFile(group.get()));
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
