// The engine's accounting: model-state bytes checked against the sizes of the tensors it holds
// and against the ZeRO formulas, and which collectives each stage issues per micro-step.
#include <ATen/core/Tensor.h>

#include <tuple>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

absl::Status CheckAccounting(int stage, Precision precision, comm::ProcessGroup* group) {
  auto net = testing::MakeNet(testing::ModelKind::kMlp);
  EngineOptions o;
  o.train_micro_batch_size_per_gpu = 2;
  o.stage = stage;
  o.precision = precision;
  o.reduce_bucket_size = 64;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group));
  testing::Batch b = testing::GlobalBatch(testing::ModelKind::kMlp, 0, 2);
  ZT_RETURN_IF_ERROR(engine->Backward(testing::Loss(*net, b.x, b.y)));
  ZT_RETURN_IF_ERROR(engine->Step());

  const ModelStateBytes bytes = engine->model_state_bytes();
  const int world = group->world_size();
  const int64_t elem = precision == Precision::kFloat32 ? 4 : 2;
  int64_t module_bytes = 0;
  for (const auto& p : net->parameters()) module_bytes += p.numel() * p.element_size();
  const int64_t padded = engine->flat_params().layout().padded_numel();
  const bool aliased = stage == 0 && precision == Precision::kFloat32;
  const int64_t master_numel = stage == 0 ? padded : padded / world;
  const std::string what =
      absl::StrCat("stage ", stage, " ", PrecisionName(precision), ": ", bytes.ToString());
  if (bytes.params != engine->flat_params().flat().nbytes() || bytes.params < module_bytes ||
      bytes.params - module_bytes >= world * elem) {
    return absl::InternalError(absl::StrCat(what, " vs module params ", module_bytes));
  }
  ZT_ASSIGN_OR_RETURN(at::Tensor master, engine->MasterCopy());
  if (master.numel() != master_numel || bytes.master != (aliased ? 0 : master.nbytes()) ||
      bytes.optimizer_states != 2 * master_numel * 4 ||
      bytes.grads != (stage == 2 ? padded / world : padded) * elem) {
    return absl::InternalError(absl::StrCat(what, ", master numel ", master.numel()));
  }
  if (static_cast<double>(bytes.total()) != engine->formula_bytes()) {
    return absl::InternalError(absl::StrCat(what, " vs formula ", engine->formula_bytes()));
  }
  return absl::OkStatus();
}

class MemoryTest : public ::testing::TestWithParam<int> {};

TEST_P(MemoryTest, AccountingMatchesTensorsAndFormula) {
  const int stage = GetParam();
  auto outcomes = SpawnRanks(2, [stage](int) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
      ZT_RETURN_IF_ERROR(CheckAccounting(stage, p, group.get()));
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Stages, MemoryTest, ::testing::Values(0, 1, 2));

// Gradient accumulation: stages 0 and 1 communicate nothing on non-boundary micro-steps; stage 2
// reduces every micro-step (DeepSpeed's behaviour). Counted from the group's op log.
int64_t OpCount(comm::ProcessGroup& group, comm::CollectiveKind kind) {
  int64_t n = 0;
  for (const comm::OpStats& s : group.log().Stats()) {
    if (s.kind == kind) n += s.count;
  }
  return n;
}

absl::StatusOr<std::string> CountOps(int stage, comm::BackendKind backend) {
  comm::GroupOptions go;
  go.log_ops = true;
  go.backend = backend;
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv(go));
  auto net = testing::MakeNet(testing::ModelKind::kMlp);
  EngineOptions o;
  o.stage = stage;
  o.train_micro_batch_size_per_gpu = 2;
  o.gradient_accumulation_steps = 3;
  o.reduce_bucket_size = 64;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  const int64_t buckets = engine->flat_params().layout().buckets().size();
  // The reducer's collective: all-reduce at stage 0, and wherever the transport's reduce-scatter
  // would copy the bucket whole (Gloo); reduce-scatter otherwise (shm).
  const bool all_reduce = stage == 0 || group->reduce_scatter_copies_input();
  const auto kind =
      all_reduce ? comm::CollectiveKind::kAllReduce : comm::CollectiveKind::kReduceScatter;
  for (int micro = 0; micro < 3; ++micro) {
    const int64_t reductions = OpCount(*group, kind);
    const int64_t gathers = OpCount(*group, comm::CollectiveKind::kAllGather);
    testing::Batch b = testing::GlobalBatch(testing::ModelKind::kMlp, micro, 2);
    ZT_RETURN_IF_ERROR(engine->Backward(testing::Loss(*net, b.x, b.y)));
    ZT_RETURN_IF_ERROR(engine->Step());
    const bool boundary = micro == 2;
    // Every stage also all-reduces, at the boundary, the gradient statistics (the inf/NaN check).
    const int64_t want = (boundary || stage == 2 ? buckets : 0) + (boundary && all_reduce ? 1 : 0);
    if (OpCount(*group, kind) - reductions != want) {
      return absl::InternalError(absl::StrCat("micro-step ", micro, ": ",
                                              OpCount(*group, kind) - reductions,
                                              " reductions, want ", want));
    }
    // At the boundary: the parameter all-gather (stages 1, 2) and the one-element all-gather in
    // which the ranks agree that every optimizer step succeeded.
    const int64_t want_gathers = boundary ? (stage > 0 ? buckets : 0) + 1 : 0;
    if (OpCount(*group, comm::CollectiveKind::kAllGather) - gathers != want_gathers) {
      return absl::InternalError(absl::StrCat("micro-step ", micro, ": unexpected all-gathers"));
    }
  }
  return std::string("ok");
}

class AccumulationTest : public ::testing::TestWithParam<std::tuple<int, comm::BackendKind>> {};

TEST_P(AccumulationTest, CommunicatesOnlyWhereTheStageSays) {
  const auto [stage, backend] = GetParam();
  auto outcomes = SpawnRanks(2, [&](int) { return CountOps(stage, backend); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Stages, AccumulationTest,
                         ::testing::Combine(::testing::Values(0, 1, 2),
                                            ::testing::Values(comm::BackendKind::kGloo,
                                                              comm::BackendKind::kShm)));

}  // namespace
}  // namespace zerotrain::engine
