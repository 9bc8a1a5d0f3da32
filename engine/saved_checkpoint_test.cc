// SavedCheckpoint: what a 2-rank stage 1 save records (parameter names and sizes, client state,
// step count, batch layout) read back without an Engine; LoadSavedParameters fills a fresh model
// with the trained values bitwise (fp32: the master is the parameters), and a model with a
// parameter the checkpoint lacks is one error naming it, with none of the others copied.
#include "engine/saved_checkpoint.h"

#include <torch/types.h>

#include <cstdlib>
#include <filesystem>
#include <string>

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

constexpr int64_t kBatch = 4;
constexpr int kSteps = 3;

std::string Dir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/saved_checkpoint");
}

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

absl::Status CheckSummary(const std::string& dir, testing::TestNet& net, int world) {
  ZT_RETURN_IF_ERROR(Expect(HasCheckpoint(dir), "HasCheckpoint is false after a save"));
  ZT_RETURN_IF_ERROR(Expect(!HasCheckpoint(dir + "/none"), "HasCheckpoint of a missing dir"));
  ZT_ASSIGN_OR_RETURN(const SavedCheckpoint saved, ReadSavedCheckpoint(dir));
  ZT_RETURN_IF_ERROR(Expect(saved.tag_dir == absl::StrCat(dir, "/global_step", kSteps),
                            "tag_dir " + saved.tag_dir));
  ZT_RETURN_IF_ERROR(Expect(saved.optimizer_steps == kSteps, "optimizer_steps"));
  ZT_RETURN_IF_ERROR(Expect(saved.train_batch_size == kBatch * world, "train_batch_size"));
  ZT_RETURN_IF_ERROR(Expect(saved.gradient_accumulation_steps == 1, "accumulation steps"));
  ZT_RETURN_IF_ERROR(Expect(saved.client_state.size() == 1 &&
                                saved.client_state.count("trainer_step") == 1 &&
                                saved.client_state.at("trainer_step") == "3",
                            "client state"));
  const auto named = net.named_parameters();
  ZT_RETURN_IF_ERROR(Expect(saved.params.size() == named.size(), "parameter count"));
  for (const SavedParameter& p : saved.params) {
    const torch::Tensor* t = named.find(p.name);
    ZT_RETURN_IF_ERROR(Expect(t != nullptr && t->numel() == p.numel, "parameter " + p.name));
  }
  return absl::OkStatus();
}

absl::Status CheckLoads(const std::string& dir, testing::TestNet& trained) {
  auto fresh = testing::MakeNet(ModelKind::kStack);
  ZT_RETURN_IF_ERROR(LoadSavedParameters(dir, *fresh));
  ZT_RETURN_IF_ERROR(Expect(testing::CompareParams(*fresh, trained, 0, 0).empty(),
                            "loaded parameters differ from the trained ones: " +
                                testing::CompareParams(*fresh, trained, 0, 0)));
  // The same stack plus a parameter the checkpoint lacks: the shared ones must stay as built.
  auto other = testing::MakeNet(ModelKind::kStack);
  auto untouched = testing::MakeNet(ModelKind::kStack);
  other->register_parameter("extra", torch::zeros({3}));
  untouched->register_parameter("extra", torch::zeros({3}));
  const absl::Status refused = LoadSavedParameters(dir, *other);
  const std::string m(refused.message());
  ZT_RETURN_IF_ERROR(Expect(refused.code() == absl::StatusCode::kInvalidArgument &&
                                m.find("does not fit the model") != std::string::npos &&
                                m.find("extra is not in it") != std::string::npos,
                            "a model with an extra parameter: " + refused.ToString()));
  return Expect(testing::CompareParams(*other, *untouched, 0, 0).empty(),
                "a refused load changed the model");
}

absl::StatusOr<std::string> SaveAndRead(int rank) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(ModelKind::kStack);
  EngineOptions o;
  o.stage = 1;
  o.train_micro_batch_size_per_gpu = kBatch;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  ZT_RETURN_IF_ERROR(testing::TrainSteps(*engine, *net, ModelKind::kStack, kSteps, kBatch));
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(Dir(), "", {{"trainer_step", "3"}}));
  if (rank == 0) {
    ZT_RETURN_IF_ERROR(CheckSummary(Dir(), *net, group->world_size()));
    ZT_RETURN_IF_ERROR(CheckLoads(Dir(), *net));
  }
  return std::string("ok");
}

TEST(SavedCheckpointTest, ReadsWhatTheEngineSavedWithoutAnEngine) {
  auto outcomes = SpawnRanks(2, [](int rank) { return SaveAndRead(rank); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
