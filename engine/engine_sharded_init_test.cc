// Stage 3 construction without materialising the model (ShardedInit): a stack of layers whose
// every layer is partitioned right after it is built never holds more than one layer's full
// values plus the slices kept so far, ranks that built different values train rank 0's model,
// and after 20 steps the parameters match the single-process AdamW reference; the same with the
// slices spilled to swap files as they are cut (none held in memory) into an engine whose shard
// is on NVMe. A ShardedInit that does not match the engine is refused, naming what differs.
#include <torch/types.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "partition/sharded_init.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;
using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

constexpr int64_t kBatch = 12;  // 3 ranks x GAS 2 x micro 2
constexpr int kSteps = 20;
constexpr int64_t kLayerBytes = 110 * 4;  // one Linear(10, 10) in fp32

int64_t FullBytes(torch::nn::Module& m) {
  int64_t bytes = 0;
  for (const auto& p : m.parameters()) bytes += p.numel() * p.element_size();
  return bytes;
}

EngineOptions Options(int gas) {
  EngineOptions o;
  o.stage = 3;
  o.train_batch_size = kBatch;
  o.gradient_accumulation_steps = gas;
  o.reduce_bucket_size = 64;  // below a layer: each layer's segment spans two buckets
  o.allgather_bucket_size = 64;
  o.adam.lr = 1e-3;
  o.adam.weight_decay = 0.01;
  o.stage3.persistence_threshold = 0;
  return o;
}

// `spill`: the slices go to swap files under TEST_TMPDIR as they are cut, and the engine keeps
// its parameter shard on NVMe.
absl::StatusOr<std::string> BuildPartitionedAndTrain(int rank, bool spill) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  EngineOptions o = Options(2);
  partition::ShardedInit init(group.get(), Stage3BucketNumel(o), o.stage3);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string nvme = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/spill_", rank);
  if (spill) {
    std::filesystem::create_directories(nvme);
    offload::SwapSpaceOptions missing_dir, dir;
    missing_dir.directory = nvme + "/missing";
    dir.directory = nvme;
    const absl::Status missing =
        partition::ShardedInit(group.get(), 64, o.stage3).SpillTo(missing_dir);
    if (missing.ok() || missing.message().find(nvme + "/missing") == std::string::npos) {
      return absl::InternalError(absl::StrCat("SpillTo a missing directory: ", missing.ToString()));
    }
    ZT_RETURN_IF_ERROR(init.SpillTo(dir));
    o.offload_param.device = OffloadDevice::kNvme;
    o.offload_param.nvme_path = nvme;
    o.offload_param.max_in_cpu = 0;
  }
  absl::Status partitioned;
  int64_t peak = 0;  // full values alive in the model while it is built
  std::vector<torch::nn::Module*> built;
  // Each rank seeds differently: training must start from rank 0's values (seed 100).
  auto net = testing::MakeStack(100 + rank, [&](torch::nn::Module& layer) {
    int64_t alive = FullBytes(layer);
    for (torch::nn::Module* m : built) alive += FullBytes(*m);
    peak = std::max(peak, alive);
    if (partitioned.ok()) partitioned = init.Partition(layer);
    built.push_back(&layer);
  });
  ZT_RETURN_IF_ERROR(partitioned);
  const int64_t kept = spill ? init.spilled_bytes() : init.shard_bytes();
  if (peak != kLayerBytes || FullBytes(*net) != 0 || kept == 0 ||
      (spill && init.shard_bytes() != 0)) {
    return absl::InternalError(absl::StrCat("while building, up to ", peak,
                                            " bytes of full "
                                            "values (one layer: ",
                                            kLayerBytes, "); after, ", FullBytes(*net),
                                            "; slices in memory ", init.shard_bytes(),
                                            ", in swap files ", init.spilled_bytes()));
  }
  o.sharded_init = &init;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  // Adopted by the engine: held once, not twice (the swap files gone with them).
  if (init.shard_bytes() != 0 || init.spilled_bytes() != 0) {
    return absl::InternalError(absl::StrCat("ShardedInit still holds ", init.shard_bytes(), " + ",
                                            init.spilled_bytes(),
                                            " bytes of slices after Engine::Create"));
  }
  if (spill) {
    int swap_dirs = 0;  // the engine's own; ShardedInit's is removed
    for (const auto& d : std::filesystem::directory_iterator(nvme)) swap_dirs += d.is_directory();
    if (swap_dirs != 1) {
      return absl::InternalError(absl::StrCat(swap_dirs, " swap directories under ", nvme));
    }
  }
  const int world = group->world_size();
  const int64_t micro = engine->batch().micro_batch_size;
  for (int step = 0; step < kSteps; ++step) {
    testing::Batch b = testing::GlobalBatch(ModelKind::kStack, step, kBatch);
    for (int g = 0; g < o.gradient_accumulation_steps; ++g) {
      const int64_t first = (g * world + rank) * micro;
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
      }
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      ZT_RETURN_IF_ERROR(engine->Step());
    }
  }
  testing::ReferenceOptions ro;
  ro.steps = kSteps;
  ro.batch = kBatch;
  ZT_RETURN_IF_ERROR(testing::MatchesReference(*engine, *net, ModelKind::kStack, ro));
  return std::string("ok");
}

TEST(ShardedInitTest, NeverHoldsTheModelAndTrainsLikeTheReference) {
  auto outcomes = SpawnRanks(3, [](int rank) { return BuildPartitionedAndTrain(rank, false); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(ShardedInitTest, SpilledToSwapFilesHoldsNoSliceAndTrainsLikeTheReference) {
  auto outcomes = SpawnRanks(3, [](int rank) { return BuildPartitionedAndTrain(rank, true); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

absl::StatusOr<std::string> MismatchedBucket() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  EngineOptions o = Options(1);
  partition::ShardedInit init(group.get(), 32, o.stage3);
  auto net =
      testing::MakeStack(100, [&](torch::nn::Module& layer) { (void)init.Partition(layer); });
  o.sharded_init = &init;
  auto engine = Engine::Create(*net, o, group.get());
  if (engine.ok()) return absl::InternalError("a ShardedInit with other buckets was accepted");
  const std::string m(engine.status().message());
  if (m.find("buckets of 32 elements") == std::string::npos) {
    return absl::InternalError("message: " + m);
  }
  return std::string("ok");
}

TEST(ShardedInitTest, RefusesAnInitCutForOtherBuckets) {
  auto outcomes = SpawnRanks(2, [](int) { return MismatchedBucket(); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
