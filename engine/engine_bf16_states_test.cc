// bf16 master weights and bf16 optimizer states (EngineOptions::bf16_master_weights,
// bf16_optimizer_states) through the Engine on 2 ranks. After one step from the same start, the
// saved master and moments of an engine keeping them in bf16 (with the model, in host memory or on
// NVMe) are exactly those of an fp32-state
// engine rounded to nearest even (the step computes in fp32 and only the storage is bf16), and
// some of them did need rounding (also for a 6.3M-parameter model, whose sub-groups are widened in
// many pieces); either checkpoint loads into an engine of the other setting (bf16 values kept,
// fp32 ones rounded to nearest, as DeepSpeed's copy_ on load); the model-state bytes equal the
// formula with K = 10 and K = 6. Over 12 steps the loss stays within 1% of a single-process fp32
// reference, and a run resumed from a checkpoint ends bitwise where the uninterrupted one does.
#include <torch/types.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;

constexpr int kWorld = 2;
constexpr int64_t kBatch = 8;
constexpr ModelKind kModel = ModelKind::kTransformer;

struct Case {
  int stage;
  OffloadDevice offload = OffloadDevice::kNone;
  // WideMlp (6.3M parameters) in one sub-group per rank: each sub-group is widened in many
  // pieces of MasterState::kPieceNumel, where the small model fits in one.
  bool wide = false;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat("stage", info.param.stage, "_offload_", OffloadDeviceName(info.param.offload),
                      info.param.wide ? "_wide" : "");
}

std::string TmpDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

EngineOptions Options(const Case& c, bool bf16_master, bool bf16_states) {
  EngineOptions o;
  o.stage = c.stage;
  o.train_batch_size = kBatch * kWorld;
  o.train_micro_batch_size_per_gpu = kBatch;
  o.precision = Precision::kBFloat16;
  o.adam.lr = 1e-2;
  o.reduce_bucket_size = 64;  // buckets and sub-groups cut parameters apart
  o.sub_group_size = 300;
  o.stage3.persistence_threshold = 0;
  o.offload_optimizer.device = c.offload;
  if (c.offload == OffloadDevice::kNvme) {
    const char* rank = std::getenv("RANK");
    o.offload_optimizer.nvme_path = TmpDir(absl::StrCat("swap_", rank != nullptr ? rank : "0"));
    std::filesystem::create_directories(o.offload_optimizer.nvme_path);
    o.offload_optimizer.buffer_count = 2;
  }
  if (c.wide) {
    o.reduce_bucket_size = o.allgather_bucket_size = testing::WideMlp::kBucketNumel;
    o.sub_group_size = 1000000000;
  }
  o.bf16_master_weights = bf16_master;
  o.bf16_optimizer_states = bf16_states;
  return o;
}

// Steps [first, last) of the test's batches, every rank training the whole batch.
absl::Status TrainRange(Engine& engine, testing::TestNet& net, int first, int last,
                        std::vector<double>* losses = nullptr) {
  return testing::TrainStepRange(engine, net, kModel, first, last, kBatch, losses);
}

// Every per-element array of a checkpoint, flat.
absl::StatusOr<std::vector<torch::Tensor>> ReadArrays(const std::string& dir,
                                                      std::vector<std::string>* names) {
  ZT_ASSIGN_OR_RETURN(auto reader, checkpoint::CheckpointReader::Open(dir));
  *names = {checkpoint::kMasterArray};
  for (const std::string& s : reader->manifest().state_arrays()) names->push_back(s);
  std::vector<torch::Tensor> out;
  for (const std::string& name : *names) {
    torch::Tensor t = torch::empty({reader->numel()}, torch::kFloat);
    ZT_RETURN_IF_ERROR(reader->ReadFlat(name, 0, reader->numel(), t.data_ptr<float>()));
    out.push_back(t);
  }
  return out;
}

// An engine with fp32 state and one with bf16 master and states take one step from the same
// start; rank 0 compares what they saved.
absl::StatusOr<std::string> FirstStepRounds(const Case& c, const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const std::string fp32_dir = dir + "/fp32", bf16_dir = dir + "/bf16";
  for (const bool bf16 : {false, true}) {
    std::shared_ptr<testing::TestNet> net =
        c.wide ? std::make_shared<testing::WideMlp>() : testing::MakeNet(kModel);
    ZT_ASSIGN_OR_RETURN(auto e, Engine::Create(*net, Options(c, bf16, bf16), group.get()));
    if (c.offload == OffloadDevice::kNone && e->model_state_bytes().total() != e->formula_bytes()) {
      return absl::InternalError(absl::StrCat("bf16 ", bf16, ": model states ",
                                              e->model_state_bytes().ToString(), ", formula ",
                                              e->formula_bytes()));
    }
    if (c.wide) {
      torch::manual_seed(11);
      const torch::Tensor x = torch::randn({4, 1024}), y = torch::randn({4, 1024});
      torch::Tensor loss;
      {
        auto forward = e->BeginForward();
        loss = testing::Loss(*net, x, y);
      }
      ZT_RETURN_IF_ERROR(e->Backward(loss));
      ZT_RETURN_IF_ERROR(e->Step());
    } else {
      ZT_RETURN_IF_ERROR(TrainRange(*e, *net, 0, 1));
    }
    ZT_RETURN_IF_ERROR(e->SaveCheckpoint(bf16 ? bf16_dir : fp32_dir));
  }
  // bf16 master weights with fp32 states (K = 10): the accounting only.
  if (c.offload == OffloadDevice::kNone) {
    std::shared_ptr<testing::TestNet> net =
        c.wide ? std::make_shared<testing::WideMlp>() : testing::MakeNet(kModel);
    ZT_ASSIGN_OR_RETURN(auto e, Engine::Create(*net, Options(c, true, false), group.get()));
    if (e->model_state_bytes().total() != e->formula_bytes()) {
      return absl::InternalError(absl::StrCat("bf16 master, fp32 states: model states ",
                                              e->model_state_bytes().ToString(), ", formula ",
                                              e->formula_bytes()));
    }
  }
  // Each checkpoint loads into an engine of the other setting, which saves it again.
  const std::string widened_dir = dir + "/bf16_into_fp32", rounded_dir = dir + "/fp32_into_bf16";
  for (const bool bf16 : {false, true}) {
    std::shared_ptr<testing::TestNet> net =
        c.wide ? std::make_shared<testing::WideMlp>() : testing::MakeNet(kModel);
    ZT_ASSIGN_OR_RETURN(auto e, Engine::Create(*net, Options(c, bf16, bf16), group.get()));
    ZT_RETURN_IF_ERROR(e->LoadCheckpoint(bf16 ? fp32_dir : bf16_dir).status());
    ZT_RETURN_IF_ERROR(e->SaveCheckpoint(bf16 ? rounded_dir : widened_dir));
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  if (group->rank() != 0) return std::string("ok");
  std::vector<std::string> names, bf16_names;
  ZT_ASSIGN_OR_RETURN(const std::vector<torch::Tensor> wide, ReadArrays(fp32_dir, &names));
  ZT_ASSIGN_OR_RETURN(const std::vector<torch::Tensor> narrow, ReadArrays(bf16_dir, &bf16_names));
  if (names != bf16_names || names.size() != 3) {
    return absl::InternalError(absl::StrCat("arrays: ", names.size(), " and ", bf16_names.size()));
  }
  for (size_t a = 0; a < names.size(); ++a) {
    const torch::Tensor rounded = wide[a].to(torch::kBFloat16).to(torch::kFloat);
    const int64_t differ = rounded.ne(narrow[a]).sum().item<int64_t>();
    if (differ != 0) {
      return absl::InternalError(absl::StrCat(names[a], ": ", differ, " of ", rounded.numel(),
                                              " elements are not the fp32 state rounded"));
    }
    // The comparison means something only where rounding changed values.
    if (rounded.ne(wide[a]).sum().item<int64_t>() == 0) {
      return absl::InternalError(absl::StrCat(names[a], ": every fp32 value was a bf16 value"));
    }
  }
  // bf16 state loaded into fp32 keeps its values; fp32 state loaded into bf16 rounds to nearest
  // (DeepSpeed's copy_ on load): both saved again equal the bf16 engine's own checkpoint.
  for (const std::string& other : {widened_dir, rounded_dir}) {
    std::vector<std::string> other_names;
    ZT_ASSIGN_OR_RETURN(const std::vector<torch::Tensor> again, ReadArrays(other, &other_names));
    for (size_t a = 0; a < names.size(); ++a) {
      const int64_t differ = again[a].ne(narrow[a]).sum().item<int64_t>();
      if (differ != 0) {
        return absl::InternalError(absl::StrCat(other, ", ", names[a], ": ", differ,
                                                " elements differ from the bf16 checkpoint"));
      }
    }
  }
  return std::string("ok");
}

void ExpectRanksOk(const zerotrain::testing::RankFn& fn) {
  auto outcomes = zerotrain::testing::SpawnRanks(kWorld, fn);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(kWorld));
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

class Bf16StatesTest : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16StatesTest, FirstStepStoresTheFp32StateRounded) {
  const Case c = GetParam();
  const std::string dir = TmpDir(CaseName({c, 0}));
  std::filesystem::remove_all(dir);
  ExpectRanksOk([c, dir](int) { return FirstStepRounds(c, dir); });
}

INSTANTIATE_TEST_SUITE_P(
    Stages, Bf16StatesTest,
    ::testing::Values(Case{1}, Case{2, OffloadDevice::kCpu}, Case{3}, Case{3, OffloadDevice::kCpu},
                      Case{2, OffloadDevice::kNone, true}, Case{3, OffloadDevice::kCpu, true},
                      Case{3, OffloadDevice::kNvme}, Case{2, OffloadDevice::kNvme, true}),
    CaseName);

// Trains against the fp32 reference, then resumes from a checkpoint taken at step 4.
absl::StatusOr<std::string> TrainAndResume(const Case& c, bool bf16_states,
                                           const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  constexpr int kSteps = 12;
  testing::ReferenceOptions ro;
  ro.lr = 1e-2;
  ro.steps = kSteps;
  ro.batch = kBatch;
  const testing::ReferenceRun ref = testing::RunReference(kModel, ro);
  auto straight = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto a,
                      Engine::Create(*straight, Options(c, true, bf16_states), group.get()));
  std::vector<double> losses;
  ZT_RETURN_IF_ERROR(TrainRange(*a, *straight, 0, 4, &losses));
  ZT_RETURN_IF_ERROR(a->SaveCheckpoint(dir));
  ZT_RETURN_IF_ERROR(TrainRange(*a, *straight, 4, kSteps, &losses));
  for (int step = 0; step < kSteps; ++step) {
    if (std::abs(losses[step] - ref.losses[step]) > 0.01 * std::abs(ref.losses[step])) {
      return absl::InternalError(absl::StrCat("step ", step, ": loss ", losses[step],
                                              ", fp32 reference ", ref.losses[step]));
    }
  }
  auto resumed = testing::MakeNet(kModel);
  ZT_ASSIGN_OR_RETURN(auto b, Engine::Create(*resumed, Options(c, true, bf16_states), group.get()));
  ZT_RETURN_IF_ERROR(b->LoadCheckpoint(dir).status());
  ZT_RETURN_IF_ERROR(TrainRange(*b, *resumed, 4, kSteps));
  ZT_ASSIGN_OR_RETURN(const std::string diff,
                      testing::GatheredDifference(*b, *resumed, *a, *straight));
  if (!diff.empty()) return absl::InternalError(absl::StrCat("resumed run differs: ", diff));
  return std::string("ok");
}

TEST(Bf16StatesTrainTest, Stage2Bf16StatesFollowsFp32AndResumesBitwise) {
  const std::string dir = TmpDir("resume_stage2");
  ExpectRanksOk([dir](int) { return TrainAndResume(Case{2}, true, dir); });
}

TEST(Bf16StatesTrainTest, Stage3Bf16MasterOffloadedFollowsFp32AndResumesBitwise) {
  const std::string dir = TmpDir("resume_stage3");
  ExpectRanksOk([dir](int) { return TrainAndResume(Case{3, OffloadDevice::kCpu}, false, dir); });
}

TEST(Bf16StatesOptionsTest, RefusesWhatDeepSpeedRefuses) {
  EngineOptions o = Options(Case{2}, false, true);
  EXPECT_NE(ValidateEngineOptions(o).message().find("bf16_optimizer_states needs"),
            std::string::npos);
  o = Options(Case{0}, true, false);
  EXPECT_NE(ValidateEngineOptions(o).message().find("ZeRO stage 1, 2 or 3"), std::string::npos);
  o = Options(Case{2}, true, false);
  o.precision = Precision::kFloat32;
  EXPECT_NE(ValidateEngineOptions(o).message().find("precision fp32"), std::string::npos);
}

}  // namespace
}  // namespace zerotrain::engine
