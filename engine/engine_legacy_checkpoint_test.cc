// Checkpoints written before the restructuring (engine in trainer/, commit fe57ee9) still load.
// engine/testdata/legacy_stage1_w2 is one, written by that engine (README.txt there: the MLP,
// AdamW, stage 1 on 2 ranks, 3 steps), with the parameters it had at the save and one step
// later. Each case loads it into a fresh, perturbed MLP (so only the load can make the values
// right) on a world size and stage of its own, requires every parameter bitwise equal to the
// saved ones, then trains the 4th step and compares with the old engine's own 4th step. That
// last check allows 1e-6 (another world size sums gradients in another order: 1.5e-8 measured
// on 1 rank, 0 on 2), while the step itself moves parameters by up to 1e-3 in amounts set by
// the restored Adam moments, so lost or mis-sliced optimizer states fail it.
#include <torch/types.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_reader.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;
// Relative to the runfiles root, where Bazel starts tests (and SpawnRanks its children).
constexpr char kDir[] = "engine/testdata/legacy_stage1_w2";
constexpr int64_t kBatch = 12;  // the writer's global batch
constexpr int kSavedSteps = 3;

// The writer's options; only the stage differs between the cases.
EngineOptions OptionsFor(int stage) {
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = kBatch;
  o.reduce_bucket_size = 64;
  o.allgather_bucket_size = 64;
  o.optimizer = OptimizerKind::kAdam;
  o.adam.adamw = true;
  o.adam.lr = 1e-3;
  o.adam.weight_decay = 0.01;
  o.stage3.persistence_threshold = 0;  // shard every submodule of this tiny model
  return o;
}

absl::StatusOr<std::vector<float>> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::streamsize bytes = in.tellg();
  std::vector<float> v(static_cast<size_t>(bytes) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  if (!in || bytes % 4 != 0) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return v;  // little-endian on disk, as on every machine this builds for
}

// Every parameter in registration order, flattened, as fp32 (gathered at stage 3).
absl::StatusOr<std::vector<float>> AllParams(Engine& engine, testing::TestNet& net) {
  const std::vector<torch::Tensor> params = testing::UniqueParameters(net);
  ZT_ASSIGN_OR_RETURN(auto gathered, engine.GatherParameters(params));
  std::vector<float> all;
  for (const torch::Tensor& p : params) {
    const torch::Tensor f = p.detach().to(torch::kFloat).contiguous().reshape({-1});
    all.insert(all.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  ZT_RETURN_IF_ERROR(gathered->Close());
  return all;
}

// Which parameter flat element i belongs to, read off a module no engine holds: at stage 3 the
// engine's module shows its parameters as [0] outside a gather. Only words a failure (MakeNet
// reseeds the generator).
std::string NameOf(size_t i) {
  auto fresh = testing::MakeNet(ModelKind::kMlp);
  for (const auto& p : fresh->named_parameters()) {
    if (i < static_cast<size_t>(p.value().numel())) return absl::StrCat(p.key(), "[", i, "]");
    i -= p.value().numel();
  }
  return absl::StrCat("element ", i, " past the end");
}

// "" when equal (bitwise when tol is 0); else the first bad element, named by parameter.
std::string Compare(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  if (got.size() != want.size() || got.empty()) {
    return absl::StrCat(got.size(), " values, expected ", want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, &want[i], 4);
    if (tol == 0 ? g != w : !(std::abs(got[i] - want[i]) <= tol)) {
      return absl::StrCat(NameOf(i), " is ", absl::StrFormat("%.9g", got[i]), " (bits ",
                          absl::Hex(g), "), want ", absl::StrFormat("%.9g", want[i]), " (bits ",
                          absl::Hex(w), ")");
    }
  }
  return "";
}

// The 4th step (global batch 3), each rank on its slice of the batch as the writer did.
absl::Status TrainOneStep(Engine& engine, testing::TestNet& net, int rank) {
  const int64_t micro = engine.batch().micro_batch_size;
  testing::Batch b = testing::GlobalBatch(ModelKind::kMlp, kSavedSteps, kBatch);
  torch::Tensor loss;
  {
    auto forward = engine.BeginForward();
    loss =
        testing::Loss(net, b.x.narrow(0, rank * micro, micro), b.y.narrow(0, rank * micro, micro));
  }
  ZT_RETURN_IF_ERROR(engine.Backward(loss));
  return engine.Step();
}

struct Case {
  std::string name;
  int world = 2, stage = 1;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

absl::StatusOr<std::string> LoadAndTrain(const Case& c) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const int rank = group->rank();
  ZT_ASSIGN_OR_RETURN(const std::vector<float> saved,
                      ReadFloats(absl::StrCat(kDir, "/expected_master.f32")));
  ZT_ASSIGN_OR_RETURN(const std::vector<float> step4,
                      ReadFloats(absl::StrCat(kDir, "/expected_step4.f32")));
  auto net = testing::MakeNet(ModelKind::kMlp);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.add_(1.0);
  }
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, OptionsFor(c.stage), group.get()));
  ZT_ASSIGN_OR_RETURN(auto client, engine->LoadCheckpoint(kDir));
  if (client["sampler"] != "3" || engine->optimizer_steps() != kSavedSteps) {
    return absl::InternalError(absl::StrCat("client state '", client["sampler"], "', ",
                                            engine->optimizer_steps(), " steps after load"));
  }
  ZT_ASSIGN_OR_RETURN(std::vector<float> loaded, AllParams(*engine, *net));
  std::string diff = Compare(loaded, saved, 0);
  if (!diff.empty()) return absl::InternalError(absl::StrCat("loaded parameters: ", diff));
  ZT_RETURN_IF_ERROR(TrainOneStep(*engine, *net, rank));
  ZT_ASSIGN_OR_RETURN(std::vector<float> after, AllParams(*engine, *net));
  diff = Compare(after, step4, 1e-6);
  if (!diff.empty()) return absl::InternalError(absl::StrCat("after the 4th step: ", diff));
  return std::string("ok");
}

class LegacyCheckpoint : public ::testing::TestWithParam<Case> {};

TEST_P(LegacyCheckpoint, LoadsBitwiseAndTrainsOn) {
  const Case c = GetParam();
  auto outcomes = zerotrain::testing::SpawnRanks(c.world, [c](int) { return LoadAndTrain(c); });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

INSTANTIATE_TEST_SUITE_P(AnyStage, LegacyCheckpoint,
                         ::testing::Values(Case{"same_w2_stage1", 2, 1}, Case{"w1_stage0", 1, 0},
                                           Case{"w2_stage3", 2, 3}),
                         [](const auto& info) { return info.param.name; });

// The data is what README.txt says, and intact: a failure above is then the loader's.
TEST(LegacyCheckpointData, IsTheDescribedCheckpoint) {
  auto reader = checkpoint::CheckpointReader::Open(kDir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const checkpoint::Manifest& m = (*reader)->manifest();
  EXPECT_EQ(m.tag(), "legacy");
  EXPECT_EQ(m.world_size(), 2);
  EXPECT_EQ(m.stage(), 1);
  EXPECT_EQ(m.optimizer_steps(), kSavedSteps);
  EXPECT_EQ(m.params_size(), 4);
  EXPECT_TRUE((*reader)->VerifyFileChecksums().ok());
}

}  // namespace
}  // namespace zerotrain::engine
