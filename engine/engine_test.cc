// The main acceptance test: ZeRO stages 0, 1, 2 and 3 on 1, 2 and 4 ranks end with the same fp32
// parameters after 20 steps as a plain single-process LibTorch loop with torch::optim::AdamW over
// the full batch (|ours - reference| <= 1e-6 + 1e-5 |reference|), for an MLP and a transformer
// block whose parameter counts no world size above 1 divides, and a net with a matrix two
// submodules share and a submodule called twice; also with gradient accumulation, clipping,
// overlap off, all-reduce instead of reduce-scatter, buckets smaller than the largest parameter,
// and for stage 3 persistent submodules, a live budget below one submodule and no prefetch.
// Every rank checks its own parameters (gathered, at stage 3) against its own reference run.
// Adam(W) is blind to a uniform scale of the gradients (sum instead of average would pass here), so
// the averaging itself is pinned by partition's gradient_reducer_test and by the SGD steps in
// engine_checks_test.
#include "engine/engine.h"

#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tests/test_mode.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;

struct Case {
  ModelKind model;
  int stage;
  int world;
  int gas = 1;
  bool overlap = true;
  double clip = 0;
  int64_t bucket = 64;  // elements: below the largest parameter of both models
  bool reduce_scatter = true;
  int64_t persist = 0;  // stage 3: submodules of at most this many elements stay whole
  int64_t max_live = 1000000000;
  int64_t prefetch = 50000000;
  int64_t gather = 0;  // allgather_bucket_size; 0: the bucket size
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(testing::ModelName(c.model), "_stage", c.stage, "_w", c.world, "_gas", c.gas,
                      c.overlap ? "_overlap" : "_nooverlap", c.clip > 0 ? "_clip" : "",
                      c.reduce_scatter ? "" : "_allreduce", "_bucket", c.bucket,
                      c.persist > 0 ? absl::StrCat("_persist", c.persist) : "",
                      c.max_live < 1000000000 ? absl::StrCat("_live", c.max_live) : "",
                      c.prefetch == 0 ? "_noprefetch" : "",
                      c.gather > 0 ? absl::StrCat("_gather", c.gather) : "");
}

absl::StatusOr<std::string> TrainAndCompare(const Case& c) {
  constexpr int64_t kBatch = 16;
  constexpr int kSteps = 20;
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(c.model);
  EngineOptions o;
  o.stage = c.stage;
  o.train_batch_size = kBatch;
  o.gradient_accumulation_steps = c.gas;
  o.overlap_comm = c.overlap;
  o.gradient_clipping = c.clip;
  o.reduce_bucket_size = c.bucket;
  o.allgather_bucket_size = c.gather > 0 ? c.gather : c.bucket;
  o.reduce_scatter = c.reduce_scatter;
  o.adam.lr = 1e-3;
  o.adam.weight_decay = 0.01;
  o.stage3.persistence_threshold = c.persist;
  o.stage3.max_live_numel = c.max_live;
  o.stage3.prefetch_numel = c.prefetch;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  const int64_t micro = engine->batch().micro_batch_size;
  double max_norm = 0;
  for (int step = 0; step < kSteps; ++step) {
    testing::Batch b = testing::GlobalBatch(c.model, step, kBatch);
    for (int g = 0; g < c.gas; ++g) {
      const int64_t first = (g * c.world + group->rank()) * micro;
      torch::Tensor loss;
      {
        auto forward = engine->BeginForward();
        loss = testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
      }
      ZT_RETURN_IF_ERROR(engine->Backward(loss));
      ZT_RETURN_IF_ERROR(engine->Step());
    }
    max_norm = std::max(max_norm, engine->last_grad_norm());
  }
  if (engine->optimizer_steps() != kSteps || engine->micro_steps() != kSteps * c.gas) {
    return absl::InternalError(absl::StrCat("took ", engine->optimizer_steps(), " steps over ",
                                            engine->micro_steps(), " micro steps"));
  }
  if (c.clip > 0 && max_norm <= c.clip) {
    return absl::InternalError(absl::StrCat("clipping never engaged: max norm ", max_norm));
  }
  testing::ReferenceOptions ro;
  ro.steps = kSteps;
  ro.batch = kBatch;
  ro.clip = c.clip;
  ZT_RETURN_IF_ERROR(testing::MatchesReference(*engine, *net, c.model, ro));
  return std::string("ok");
}

class EquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(EquivalenceTest, MatchesSingleProcessAdamW) {
  const Case c = GetParam();
  auto outcomes = zerotrain::testing::SpawnRanks(c.world, [c](int) { return TrainAndCompare(c); });
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(c.world));
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

// Every model at every stage on 1, 2 and 4 ranks; the short mode (tests/test_mode.h) takes one
// world size per model and stage, rotating, so that each stage still meets each world size and
// each model each world size.
std::vector<Case> Grid() {
  const ModelKind models[] = {ModelKind::kMlp, ModelKind::kTransformer, ModelKind::kTied};
  const int worlds[] = {1, 2, 4};
  std::vector<Case> cases;
  for (int m = 0; m < 3; ++m) {
    for (int stage : {0, 1, 2, 3}) {
      for (int w = 0; w < 3; ++w) {
        if (zerotrain::testing::FullTestMode() || w == (m + stage) % 3) {
          cases.push_back(Case{models[m], stage, worlds[w]});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Grid, EquivalenceTest, ::testing::ValuesIn(Grid()), CaseName);

// GAS=4 with clipping, overlap on and off, all-reduce for reduction, one big bucket.
INSTANTIATE_TEST_SUITE_P(
    Variants, EquivalenceTest,
    ::testing::Values(
        Case{ModelKind::kMlp, 0, 2, 4, false, 0.05}, Case{ModelKind::kMlp, 1, 2, 4, false, 0.05},
        Case{ModelKind::kMlp, 2, 2, 4, false, 0.05}, Case{ModelKind::kMlp, 2, 4, 4, true, 0.05},
        Case{ModelKind::kTransformer, 1, 2, 4, true, 0.05, 1 << 20, false},
        Case{ModelKind::kTransformer, 2, 2, 4, true, 0.05, 1 << 20, false},
        Case{ModelKind::kTransformer, 2, 2, 1, false, 0, 100},
        Case{ModelKind::kMlp, 3, 2, 4, false, 0.05},
        Case{ModelKind::kTransformer, 3, 4, 4, true, 0.05},
        Case{ModelKind::kTransformer, 3, 2, 1, true, 0, 1 << 20, false},
        // LayerNorms (16 elements) stay whole; at most 40 gathered elements live.
        Case{ModelKind::kTransformer, 3, 2, 2, true, 0.05, 64, true, 16, 40},
        Case{ModelKind::kTied, 3, 4, 2, true, 0.05, 64, true, 0, 1000000000, 0},
        // All-gathers of at most 24 or 10 elements: pieces of every bucket.
        Case{ModelKind::kTransformer, 1, 4, 1, true, 0, 64, true, 0, 1000000000, 50000000, 24},
        Case{ModelKind::kMlp, 2, 2, 2, false, 0.05, 1 << 20, true, 0, 1000000000, 50000000, 10},
        Case{ModelKind::kMlp, 1, 4, 1, true, 0, 64, false, 0, 1000000000, 50000000, 10}),
    CaseName);

}  // namespace
}  // namespace zerotrain::engine
