// Offload against the same engine without it, on 2 ranks: 20 steps at stages 1, 2 and 3, fp32
// and bf16, with offload_optimizer cpu and nvme (and at stage 3 offload_param cpu, and nvme for
// both with no part kept in host memory) end with bitwise the same fp32 master weights and model
// parameters; a checkpoint saved from NVMe-held state resumes bitwise in a cpu-offload engine.
// With gradient accumulation and clipping, the gradients stages 2 and 3 keep on NVMe (and the
// norm summed from them) train as the engine without offload does.
#include <sys/resource.h>
#include <unistd.h>

#include <torch/types.h>

#include <csignal>
#include <filesystem>
#include <tuple>

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

constexpr int64_t kBatch = 8;
constexpr int64_t kSubGroup = 37;  // odd, so sub-groups cut across vector lanes and buckets

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/offload_", name);
}

EngineOptions Options(int stage, Precision precision, OffloadDevice device,
                      const std::string& nvme_dir, OffloadDevice param = OffloadDevice::kNone,
                      int64_t max_in_cpu = 0) {
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = kBatch;
  o.precision = precision;
  o.reduce_bucket_size = 64;
  o.allgather_bucket_size = 64;
  o.adam.lr = 1e-2;
  o.stage3.persistence_threshold = 16;  // the LayerNorms stay whole: the persistent refresh
  o.offload_optimizer.device = device;
  o.offload_optimizer.nvme_path = nvme_dir;
  o.offload_optimizer.buffer_count = 2;
  o.offload_optimizer.aio.block_size = 4096;  // several transfers per sub-group region
  o.sub_group_size = kSubGroup;
  o.offload_param.device = param;
  o.offload_param.nvme_path = nvme_dir;
  o.offload_param.max_in_cpu = max_in_cpu;  // 0: every part on NVMe
  o.offload_param.aio.block_size = 4096;
  return o;
}

absl::Status Train(Engine& engine, testing::TestNet& net, int rank, int from, int to) {
  const int64_t micro = engine.batch().micro_batch_size;
  for (int step = from; step < to; ++step) {
    testing::Batch b = testing::GlobalBatch(ModelKind::kTransformer, step, kBatch);
    torch::Tensor loss;
    {
      auto forward = engine.BeginForward();
      loss = testing::Loss(net, b.x.narrow(0, rank * micro, micro),
                           b.y.narrow(0, rank * micro, micro));
    }
    ZT_RETURN_IF_ERROR(engine.Backward(loss));
    ZT_RETURN_IF_ERROR(engine.Step());
  }
  return absl::OkStatus();
}

struct Outcome {
  at::Tensor master;
  std::vector<at::Tensor> params;  // gathered at stage 3
};

absl::StatusOr<Outcome> Finish(Engine& engine, testing::TestNet& net) {
  Outcome out;
  ZT_ASSIGN_OR_RETURN(out.master, engine.MasterCopy());
  std::vector<at::Tensor> params = testing::UniqueParameters(net);
  ZT_ASSIGN_OR_RETURN(auto gathered, engine.GatherParameters(params));
  for (const at::Tensor& p : params) out.params.push_back(p.detach().clone());
  ZT_RETURN_IF_ERROR(gathered->Close());
  return out;
}

absl::Status SameBits(const Outcome& got, const Outcome& want, const std::string& what) {
  if (!at::equal(got.master, want.master)) {
    return absl::InternalError(absl::StrCat(what, ": fp32 master differs, max |diff| ",
                                            (got.master - want.master).abs().max().item<double>()));
  }
  for (size_t i = 0; i < want.params.size(); ++i) {
    if (!at::equal(got.params[i], want.params[i])) {
      return absl::InternalError(absl::StrCat(what, ": parameter ", i, " differs"));
    }
  }
  return absl::OkStatus();
}

// One configuration on this rank: none, cpu and nvme; the nvme run saves at step 10 and a cpu
// engine resumes from it.
absl::Status CompareDevices(comm::ProcessGroup* group, int stage, Precision precision) {
  const int rank = group->rank();
  const std::string what = absl::StrCat("stage ", stage, " ", PrecisionName(precision));
  const std::string nvme = TestDir(absl::StrCat("nvme_", stage, "_", rank));
  const std::string ckpt = TestDir(absl::StrCat("ckpt_", stage, "_", PrecisionName(precision)));
  std::filesystem::create_directories(nvme);
  Outcome none;
  at::Tensor initial;
  using D = OffloadDevice;
  struct Run {
    D device, param;
    int64_t max_in_cpu;
  };
  std::vector<Run> runs = {
      {D::kNone, D::kNone, 0}, {D::kCpu, D::kNone, 0}, {D::kNvme, D::kNone, 0}};
  if (stage == 3) {
    runs.push_back({D::kNone, D::kCpu, 0});
    runs.push_back({D::kNvme, D::kNvme, 0});
    runs.push_back({D::kCpu, D::kNvme, 300});  // the first parts kept in host memory
  }
  for (const auto& [device, param, max_in_cpu] : runs) {
    auto net = testing::MakeNet(ModelKind::kTransformer);
    EngineOptions o = Options(stage, precision, device, nvme, param, max_in_cpu);
    // The reference steps its shard in one piece: cutting it into sub-groups changes no bit.
    if (device == D::kNone && param == D::kNone) o.sub_group_size = 1000000000;
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group));
    if (device == D::kNone && param == D::kNone) {
      ZT_ASSIGN_OR_RETURN(initial, engine->MasterCopy());
    }
    ZT_RETURN_IF_ERROR(Train(*engine, *net, rank, 0, 10));
    if (device == D::kNvme && param == D::kNone) {
      ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(ckpt, "s10"));
    }
    ZT_RETURN_IF_ERROR(Train(*engine, *net, rank, 10, 20));
    ZT_ASSIGN_OR_RETURN(Outcome got, Finish(*engine, *net));
    if (device == D::kNone && param == D::kNone) {
      none = got;
      if (at::equal(none.master, initial)) return absl::InternalError(what + ": nothing trained");
      continue;
    }
    ZT_RETURN_IF_ERROR(SameBits(got, none,
                                absl::StrCat(what, " offload_optimizer ", OffloadDeviceName(device),
                                             " offload_param ", OffloadDeviceName(param))));
  }
  auto net = testing::MakeNet(ModelKind::kTransformer);
  ZT_ASSIGN_OR_RETURN(
      auto resumed,
      Engine::Create(*net, Options(stage, precision, OffloadDevice::kCpu, ""), group));
  ZT_RETURN_IF_ERROR(resumed->LoadCheckpoint(ckpt, "s10").status());
  ZT_RETURN_IF_ERROR(Train(*resumed, *net, rank, 10, 20));
  ZT_ASSIGN_OR_RETURN(Outcome got, Finish(*resumed, *net));
  ZT_RETURN_IF_ERROR(SameBits(got, none, what + ": resumed from the nvme checkpoint"));
  if (stage != 3) return absl::OkStatus();
  // Into an engine with its state and parameter shard on NVMe as well: the load streams each
  // sub-group into the state and rounds it into the shard one part at a time.
  resumed.reset();
  auto net_nvme = testing::MakeNet(ModelKind::kTransformer);
  ZT_ASSIGN_OR_RETURN(
      auto on_nvme,
      Engine::Create(*net_nvme, Options(stage, precision, D::kNvme, nvme, D::kNvme, 0), group));
  ZT_RETURN_IF_ERROR(on_nvme->LoadCheckpoint(ckpt, "s10").status());
  ZT_RETURN_IF_ERROR(Train(*on_nvme, *net_nvme, rank, 10, 20));
  ZT_ASSIGN_OR_RETURN(Outcome from_nvme, Finish(*on_nvme, *net_nvme));
  return SameBits(from_nvme, none, what + ": resumed from the nvme checkpoint onto nvme");
}

class OffloadEquivalence : public ::testing::TestWithParam<std::tuple<int, Precision>> {};

TEST_P(OffloadEquivalence, NoneCpuNvmeBitwiseEqual) {
  const auto [stage, precision] = GetParam();
  auto outcomes =
      SpawnRanks(2, [stage = stage, precision = precision](int) -> absl::StatusOr<std::string> {
        ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
        ZT_RETURN_IF_ERROR(CompareDevices(group.get(), stage, precision));
        return std::string("ok");
      });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Stages, OffloadEquivalence,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(Precision::kFloat32,
                                                              Precision::kBFloat16)),
                         [](const auto& info) {
                           return absl::StrCat("stage", std::get<0>(info.param), "_",
                                               PrecisionName(std::get<1>(info.param)));
                         });

// Two micro steps per optimizer step and a clipping threshold below the gradients' norm, without
// offload and with the state (and so the gradients) on NVMe. The accumulation is the same fp32
// adds in the same order; the norm is summed in another order (per sub-group rather than per
// bucket), so the results agree to rounding rather than bitwise.
absl::Status CompareAccumulation(comm::ProcessGroup* group, int stage) {
  const std::string what = absl::StrCat("stage ", stage, " accumulation and clipping");
  const std::string nvme = TestDir(absl::StrCat("acc_", stage, "_", group->rank()));
  std::filesystem::create_directories(nvme);
  std::vector<Outcome> outcomes;
  std::vector<double> norms;
  for (OffloadDevice device : {OffloadDevice::kNone, OffloadDevice::kNvme}) {
    auto net = testing::MakeNet(ModelKind::kTransformer);
    EngineOptions o = Options(stage, Precision::kFloat32, device, nvme);
    o.train_micro_batch_size_per_gpu = 2;
    o.gradient_clipping = 0.05;
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group));
    if (engine->batch().gradient_accumulation_steps != 2) {
      return absl::InternalError(what + ": not 2 micro steps per step");
    }
    ZT_RETURN_IF_ERROR(Train(*engine, *net, group->rank(), 0, 12));
    norms.push_back(engine->last_grad_norm());
    ZT_ASSIGN_OR_RETURN(Outcome got, Finish(*engine, *net));
    outcomes.push_back(got);
  }
  if (!(norms[0] > 0.05)) return absl::InternalError(absl::StrCat(what, ": norm ", norms[0]));
  // The kernels square and add float lanes, and only then sum in float64: float's rounding.
  if (std::abs(norms[1] - norms[0]) > 1e-6 * norms[0]) {
    return absl::InternalError(absl::StrCat(what, ": grad norm ", norms[1], " against ", norms[0],
                                            ", differing by ", norms[1] - norms[0]));
  }
  const at::Tensor diff = (outcomes[1].master - outcomes[0].master).abs();
  if (!at::allclose(outcomes[1].master, outcomes[0].master, 1e-5, 1e-6)) {
    return absl::InternalError(
        absl::StrCat(what, ": fp32 master differs, max |diff| ", diff.max().item<double>()));
  }
  return absl::OkStatus();
}

TEST(OffloadGradients, AccumulatedAndClippedOnNvmeAsWithout) {
  auto outcomes = SpawnRanks(2, [](int) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    for (int stage : {2, 3}) ZT_RETURN_IF_ERROR(CompareAccumulation(group.get(), stage));
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
