// ZeroInit, the Engine's zero.Init: a stack partitioned layer by layer as it is built, each rank
// seeding differently, trains from rank 0's values to the single-process AdamW reference, with
// the parts in memory and spilled to swap files (offload_param nvme, taken from the options);
// below stage 3, and with an unusable nvme_path, Create refuses naming the stage or the path.
#include "engine/zero_init.h"

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

constexpr int64_t kBatch = 8;
constexpr int kSteps = 10;

EngineOptions Stage3Options() {
  EngineOptions o;
  o.stage = 3;
  o.train_micro_batch_size_per_gpu = kBatch;  // every rank trains on the whole batch
  o.reduce_bucket_size = 64;                  // below a layer: segments span buckets
  o.allgather_bucket_size = 64;
  o.stage3.persistence_threshold = 0;
  return o;
}

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

absl::StatusOr<std::string> PartitionAndTrain(int rank, bool nvme) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  EngineOptions o = Stage3Options();
  if (nvme) {
    o.offload_param.device = OffloadDevice::kNvme;
    o.offload_param.nvme_path = TempDir(absl::StrCat("zero_init_", rank));
    o.offload_param.max_in_cpu = 0;
    std::filesystem::create_directories(o.offload_param.nvme_path);
  }
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<ZeroInit> init, ZeroInit::Create(group.get(), &o));
  if (o.sharded_init == nullptr) return absl::InternalError("options.sharded_init not set");
  absl::Status partitioned;
  auto net = testing::MakeStack(100 + rank, [&](torch::nn::Module& layer) {
    if (partitioned.ok()) partitioned = init->Partition(layer);
  });
  ZT_RETURN_IF_ERROR(partitioned);
  for (const auto& p : net->parameters()) {
    if (p.numel() != 0) return absl::InternalError("a parameter kept its full values");
  }
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  ZT_RETURN_IF_ERROR(testing::TrainSteps(*engine, *net, ModelKind::kStack, kSteps, kBatch));
  testing::ReferenceOptions ro;
  ro.steps = kSteps;
  ro.batch = kBatch;
  ZT_RETURN_IF_ERROR(testing::MatchesReference(*engine, *net, ModelKind::kStack, ro));
  return std::string("ok");
}

TEST(ZeroInitTest, PartitionedWhileBuiltTrainsLikeTheReference) {
  auto outcomes = SpawnRanks(2, [](int rank) { return PartitionAndTrain(rank, false); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(ZeroInitTest, SpilledToNvmeAsTheOptionsSayTrainsLikeTheReference) {
  auto outcomes = SpawnRanks(2, [](int rank) { return PartitionAndTrain(rank, true); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

absl::StatusOr<std::string> Refusals() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  EngineOptions o = Stage3Options();
  o.stage = 2;
  absl::StatusOr<std::unique_ptr<ZeroInit>> init = ZeroInit::Create(group.get(), &o);
  if (init.ok() || init.status().message().find("stage 2") == std::string::npos) {
    return absl::InternalError(absl::StrCat("stage 2: ", init.status().ToString()));
  }
  o = Stage3Options();
  o.offload_param.device = OffloadDevice::kNvme;
  o.offload_param.nvme_path = TempDir("zero_init_missing/none");
  init = ZeroInit::Create(group.get(), &o);
  if (init.ok() || init.status().message().find(o.offload_param.nvme_path) == std::string::npos) {
    return absl::InternalError(absl::StrCat("missing nvme_path: ", init.status().ToString()));
  }
  if (o.sharded_init != nullptr) return absl::InternalError("a refused Create set sharded_init");
  return std::string("ok");
}

TEST(ZeroInitTest, RefusesBelowStage3AndAnUnusableNvmePath) {
  auto outcomes = SpawnRanks(2, [](int) { return Refusals(); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
