// What stage 3 adds beyond the equivalence suite (engine_test): model-state bytes per rank equal
// 16 Psi / N plus the persistent submodules; the gathered elements alive never exceed
// stage3_max_live_parameters plus one submodule, and the budget binds; prefetching happens only
// when asked for; parameters outside a forward scope have shape [0], their full shape is
// queryable, and reading one fails with a message pointing to GatheredParameters; a modifier
// rank's changes inside GatheredParameters reach every rank's shard and fp32 master; and a
// forward that takes another branch than the recorded one trains on without a hang.
#include <torch/types.h>

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

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

EngineOptions Stage3(Precision precision) {
  EngineOptions o;
  o.stage = 3;
  o.train_micro_batch_size_per_gpu = 4;
  o.precision = precision;
  o.reduce_bucket_size = 64;
  o.allgather_bucket_size = 64;
  o.stage3.persistence_threshold = 16;  // the transformer's LayerNorms stay whole
  return o;
}

absl::Status TrainSteps(Engine& engine, testing::TestNet& net, ModelKind model, int steps) {
  return testing::TrainSteps(engine, net, model, steps, 4);
}

int64_t LargestSegment(const partition::ShardLayout& layout) {
  int64_t largest = 0;
  for (int s = 0; s < layout.num_segments(); ++s) {
    largest = std::max(largest, layout.SegmentNumel(s));
  }
  return largest;
}

// Returns the peak of live gathered elements.
absl::StatusOr<int64_t> MemoryAndBudget(Precision precision, int64_t max_live, int64_t prefetch) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(ModelKind::kTransformer);
  EngineOptions o = Stage3(precision);
  o.stage3.max_live_numel = max_live;
  o.stage3.prefetch_numel = prefetch;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  ZT_RETURN_IF_ERROR(TrainSteps(*engine, *net, ModelKind::kTransformer, 3));
  const partition::GatherStats st = engine->gather_stats();
  const ModelStateBytes b = engine->model_state_bytes();
  const int64_t elem = precision == Precision::kFloat32 ? 4 : 2;
  const double persistent = static_cast<double>(st.persistent_numel * elem);
  const std::string what = absl::StrCat(b.ToString(), "; formula ", engine->formula_bytes(),
                                        " + persistent ", persistent);
  ZT_RETURN_IF_ERROR(Expect(st.persistent_numel > 0, "no submodule stayed whole: " + what));
  ZT_RETURN_IF_ERROR(Expect(b.total() == engine->formula_bytes() + persistent, what));
  ZT_RETURN_IF_ERROR(Expect(st.live_numel == 0, "gathered parameters alive after Step"));
  const int64_t bound = max_live + LargestSegment(engine->flat_params().layout());
  ZT_RETURN_IF_ERROR(Expect(st.peak_live_numel <= bound,
                            absl::StrCat("peak live ", st.peak_live_numel, " > ", bound)));
  ZT_RETURN_IF_ERROR(Expect((st.prefetches > 0) == (prefetch > 0),
                            absl::StrCat(st.prefetches, " prefetches with budget ", prefetch)));
  ZT_RETURN_IF_ERROR(Expect(st.gathers > 0, "nothing was gathered"));
  return st.peak_live_numel;
}

// A budget of 100 elements (below every submodule) without prefetch, then no budget with
// prefetch, in both precisions; the unbounded runs must keep more alive, or the budget never bound.
absl::StatusOr<std::string> BudgetsAndPrecisions() {
  for (Precision p : {Precision::kBFloat16, Precision::kFloat32}) {
    ZT_ASSIGN_OR_RETURN(const int64_t bounded, MemoryAndBudget(p, 100, 0));
    ZT_ASSIGN_OR_RETURN(const int64_t unbounded, MemoryAndBudget(p, 1000000000, 50000000));
    ZT_RETURN_IF_ERROR(Expect(bounded < unbounded,
                              absl::StrCat(PrecisionName(p), ": peak live ", bounded,
                                           " with a budget of 100, ", unbounded, " without")));
  }
  return std::string("ok");
}

TEST(Stage3Memory, ModelStatesAndLiveBudget) {
  auto outcomes = SpawnRanks(2, [](int) { return BudgetsAndPrecisions(); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

absl::StatusOr<std::string> AccessOutsideForward(int rank) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(ModelKind::kMlp);
  const torch::Tensor w = net->named_parameters()["fc1.weight"];
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, Stage3(Precision::kBFloat16), group.get()));
  ZT_RETURN_IF_ERROR(Expect(w.numel() == 0, "shape outside a scope is not [0]"));
  ZT_RETURN_IF_ERROR(Expect(engine->FullShape(w) == std::vector<int64_t>({17, 10}), "full shape"));
  try {
    (void)w.sum();
    return absl::InternalError("reading a partitioned parameter outside forward did not fail");
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    ZT_RETURN_IF_ERROR(Expect(m.find("fc1.weight") != std::string::npos &&
                                  m.find("GatheredParameters") != std::string::npos,
                              "message: " + m));
  }
  // Rank 1 sets the weight; every rank then holds it, in its shard and its fp32 master.
  {
    ZT_ASSIGN_OR_RETURN(auto gathered, engine->GatherParameters({w}, /*modifier_rank=*/1));
    ZT_RETURN_IF_ERROR(Expect(w.sizes() == torch::IntArrayRef({17, 10}), "gathered shape"));
    torch::NoGradGuard no_grad;
    w.fill_(rank == 1 ? 0.25 : -7.0);
    ZT_RETURN_IF_ERROR(gathered->Close());
  }
  ZT_RETURN_IF_ERROR(Expect(w.numel() == 0, "shape after GatheredParameters is not [0]"));
  // An SGD-free check of the master: one step with lr 0 writes the master back into the shard.
  engine->set_lr(0.0);
  ZT_RETURN_IF_ERROR(TrainSteps(*engine, *net, ModelKind::kMlp, 1));
  ZT_ASSIGN_OR_RETURN(auto gathered, engine->GatherParameters({w}));
  const bool all = torch::equal(w.to(torch::kFloat), torch::full({17, 10}, 0.25));
  ZT_RETURN_IF_ERROR(gathered->Close());
  ZT_RETURN_IF_ERROR(Expect(all, "rank 1's values did not reach every rank's master"));
  return std::string("ok");
}

TEST(Stage3Access, ShapesErrorsAndModifierRank) {
  auto outcomes = SpawnRanks(2, [](int rank) { return AccessOutsideForward(rank); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// fc1 -> fc2 normally; on some steps fc1 -> fc3 (fc2 unused), as a data-dependent branch would.
struct Branchy : testing::TestNet {
  Branchy() {
    fc1 = register_module("fc1", torch::nn::Linear(10, 12));
    fc2 = register_module("fc2", torch::nn::Linear(12, 5));
    fc3 = register_module("fc3", torch::nn::Linear(12, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor h = torch::tanh(fc1(x));
    return other ? fc3(h) : fc2(h);
  }
  bool other = false;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

absl::StatusOr<std::string> ChangeOfOrder() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  torch::manual_seed(0);
  auto net = std::make_shared<Branchy>();
  EngineOptions o = Stage3(Precision::kFloat32);
  o.ignore_unused_parameters = true;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  for (int step = 0; step < 6; ++step) {
    net->other = step == 3;
    ZT_RETURN_IF_ERROR(TrainSteps(*engine, *net, ModelKind::kMlp, 1));
  }
  const partition::GatherStats st = engine->gather_stats();
  // Step 3 departs from the record; step 4 departs from step 3's; then the order holds again.
  ZT_RETURN_IF_ERROR(
      Expect(st.order_departures == 2, absl::StrCat(st.order_departures, " departures")));
  ZT_RETURN_IF_ERROR(Expect(st.prefetches > 0, "no prefetch once the order held"));
  return std::string("ok");
}

TEST(Stage3Order, AnotherBranchFallsBackToOnDemand) {
  auto outcomes = SpawnRanks(2, [](int) { return ChangeOfOrder(); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
