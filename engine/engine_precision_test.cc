// Mixed precision: bf16 training (fp32 master weights) follows the fp32 reference loss curve
// within 1% at every stage, and so does an fp32 engine over a module with an fp32 and a bf16
// layer; an inf injected into one rank's gradient makes every rank skip that step (fp16 also
// halves the loss scale; bf16 and fp32 skip through check_grad_overflow, and without it the inf
// reaches the weights), and the ranks then continue with identical weights.
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tests/test_mode.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;
using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

constexpr int64_t kBatch = 16;
constexpr int kSteps = 20;

absl::StatusOr<std::string> Bf16LossCurve(ModelKind model, int stage) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(model);
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = kBatch;
  o.precision = Precision::kBFloat16;
  o.reduce_bucket_size = 64;
  o.adam.lr = 1e-2;  // large enough that training moves the loss well beyond the 1% tolerance
  o.stage3.persistence_threshold = 0;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  const int64_t micro = engine->batch().micro_batch_size;
  testing::ReferenceOptions ro;
  ro.lr = 1e-2;
  testing::ReferenceRun ref = testing::RunReference(model, ro);
  for (int step = 0; step < kSteps; ++step) {
    testing::Batch b = testing::GlobalBatch(model, step, kBatch);
    const int64_t first = group->rank() * micro;
    torch::Tensor loss;
    {
      auto forward = engine->BeginForward();
      loss = testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
    }
    torch::Tensor global = loss.detach().clone();
    ZT_RETURN_IF_ERROR(group->AllReduce(global, comm::ReduceOp::kAvg));
    const double want = ref.losses[step];
    const double got = global.item<double>();
    if (std::abs(got - want) > 0.01 * std::abs(want)) {
      return absl::InternalError(
          absl::StrCat("step ", step, ": bf16 loss ", got, " vs fp32 reference ", want));
    }
    ZT_RETURN_IF_ERROR(engine->Backward(loss));
    ZT_RETURN_IF_ERROR(engine->Step());
  }
  // An engine that never updated the weights must fail the comparison above.
  testing::Batch last = testing::GlobalBatch(model, kSteps - 1, kBatch);
  const double untrained = testing::Loss(*testing::MakeNet(model), last.x, last.y).item<double>();
  if (std::abs(untrained - ref.losses.back()) < 0.03 * ref.losses.back()) {
    return absl::InternalError(absl::StrCat("training moved the loss only from ", untrained, " to ",
                                            ref.losses.back(), "; the check is vacuous"));
  }
  return std::string("ok");
}

// (model, stage, world size)
class Bf16Test : public ::testing::TestWithParam<std::tuple<ModelKind, int, int>> {};

TEST_P(Bf16Test, LossCurveWithinOnePercentOfFp32) {
  const auto [model, stage, world] = GetParam();
  auto outcomes = SpawnRanks(
      world, [model = model, stage = stage](int) { return Bf16LossCurve(model, stage); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Stages, Bf16Test,
                         ::testing::Combine(::testing::Values(ModelKind::kMlp,
                                                              ModelKind::kTransformer),
                                            ::testing::Values(0, 1, 2, 3), ::testing::Values(2)));
// Stages 1-3 on 1 and 4 ranks; the short mode (tests/test_mode.h) keeps one world size per model
// and stage, so that each model still meets both and stage 3 runs on both.
std::vector<std::tuple<ModelKind, int, int>> WorldSizes() {
  std::vector<std::tuple<ModelKind, int, int>> cases;
  for (const ModelKind model : {ModelKind::kMlp, ModelKind::kTransformer}) {
    for (const int stage : {1, 2, 3}) {
      for (const int world : {1, 4}) {
        const bool rotated = (world == 4) == ((stage + (model == ModelKind::kMlp)) % 2 == 0);
        if (zerotrain::testing::FullTestMode() || rotated) cases.emplace_back(model, stage, world);
      }
    }
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(WorldSizes, Bf16Test, ::testing::ValuesIn(WorldSizes()));

// A module its user mixed by hand (an fp32 layer, a bf16 layer) in an fp32 engine: one flat
// buffer per dtype. The loss follows the all-fp32 reference within 1% (the bf16 layer's
// rounding is the only difference), and every parameter is its fp32 master weight rounded to its
// own dtype, which checks where each group's elements sit in the shard.
absl::StatusOr<std::string> MixedDtypes(int stage) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(ModelKind::kMixedMlp);
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = kBatch;
  o.reduce_bucket_size = 64;
  o.allgather_bucket_size = 24;  // stage 1/2 gathers buckets in pieces
  o.adam.lr = 1e-2;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  const partition::FlatParams& flat = engine->flat_params();
  if (flat.groups().size() != 2 || flat.groups()[0].dtype != torch::kBFloat16 ||
      flat.groups()[1].dtype != torch::kFloat) {
    return absl::InternalError(absl::StrCat(flat.groups().size(),
                                            " groups; want bf16 (fc2, "
                                            "laid out first as backward reaches it first), fp32"));
  }
  testing::ReferenceOptions ro;
  ro.lr = 1e-2;
  testing::ReferenceRun ref = testing::RunReference(ModelKind::kMlp, ro);
  const int64_t micro = engine->batch().micro_batch_size;
  for (int step = 0; step < kSteps; ++step) {
    testing::Batch b = testing::GlobalBatch(ModelKind::kMixedMlp, step, kBatch);
    const int64_t first = group->rank() * micro;
    torch::Tensor loss =
        testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
    torch::Tensor global = loss.detach().clone();
    ZT_RETURN_IF_ERROR(group->AllReduce(global, comm::ReduceOp::kAvg));
    if (std::abs(global.item<double>() - ref.losses[step]) > 0.01 * std::abs(ref.losses[step])) {
      return absl::InternalError(absl::StrCat("step ", step, ": loss ", global.item<double>(),
                                              " vs fp32 reference ", ref.losses[step]));
    }
    ZT_RETURN_IF_ERROR(engine->Backward(loss));
    ZT_RETURN_IF_ERROR(engine->Step());
  }
  testing::Batch last = testing::GlobalBatch(ModelKind::kMlp, kSteps - 1, kBatch);
  const double untrained =
      testing::Loss(*testing::MakeNet(ModelKind::kMlp), last.x, last.y).item<double>();
  if (std::abs(untrained - ref.losses.back()) < 0.03 * ref.losses.back()) {
    return absl::InternalError("training barely moved the loss; the check is vacuous");
  }
  ZT_ASSIGN_OR_RETURN(const torch::Tensor master, engine->MasterCopy());
  const partition::ShardLayout& layout = flat.layout();
  for (int i = 0; i < flat.num_params(); ++i) {
    const torch::Tensor p = flat.params()[i].second.detach().reshape({-1});
    if (p.scalar_type() != flat.dtype(i)) {
      return absl::InternalError(
          absl::StrCat(flat.name(i), " is now ", c10::toString(p.scalar_type())));
    }
    for (const partition::ParamPiece& piece : layout.PiecesOf(i)) {
      if (stage > 0 && piece.rank != group->rank()) continue;
      const int64_t at = stage == 0 ? piece.flat_begin : piece.shard_offset;
      const torch::Tensor want = master.narrow(0, at, piece.numel).to(p.scalar_type());
      if (!torch::equal(p.narrow(0, piece.param_offset, piece.numel), want)) {
        return absl::InternalError(absl::StrCat(flat.name(i), " elements [", piece.param_offset,
                                                ", +", piece.numel, ") differ from the master"));
      }
    }
  }
  return std::string("ok");
}

// (stage, world size)
class MixedDtypeTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(MixedDtypeTest, OneBufferPerDtypeFollowsFp32) {
  const auto [stage, world] = GetParam();
  auto outcomes = SpawnRanks(world, [stage = stage](int) { return MixedDtypes(stage); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// Stages 0-2 on 1, 2 and 4 ranks; the short mode keeps one world size per stage, each once.
std::vector<std::tuple<int, int>> MixedCases() {
  std::vector<std::tuple<int, int>> cases;
  const int worlds[] = {1, 2, 4};
  for (int stage = 0; stage <= 2; ++stage) {
    for (int w = 0; w < 3; ++w) {
      if (zerotrain::testing::FullTestMode() || w == (stage + 1) % 3) {
        cases.emplace_back(stage, worlds[w]);
      }
    }
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Stages, MixedDtypeTest, ::testing::ValuesIn(MixedCases()));

// Every parameter's values end to end, as fp32 (gathered at stage 3).
absl::StatusOr<torch::Tensor> AllParams(Engine& engine, testing::TestNet& net) {
  ZT_ASSIGN_OR_RETURN(auto gathered, engine.GatherParameters(testing::UniqueParameters(net)));
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& p : testing::UniqueParameters(net)) {
    parts.push_back(p.detach().reshape({-1}).to(torch::kFloat));
  }
  torch::Tensor all = torch::cat(parts);
  ZT_RETURN_IF_ERROR(gathered->Close());
  return all;
}

struct OverflowCase {
  int stage;
  Precision precision;
  bool check_grad_overflow = true;  // bf16/fp32; fp16 always skips
  double clip = 0;                  // a non-finite norm cannot clip: skipped whatever the check
  bool skips() const { return precision == Precision::kFloat16 || check_grad_overflow || clip > 0; }
};

// Returns the hex of the fp32 bytes of the final parameters, so the parent can compare ranks.
absl::StatusOr<std::string> Overflow(const OverflowCase& c, int rank) {
  constexpr int kBadStep = 3;
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  auto net = testing::MakeNet(ModelKind::kMlp);
  EngineOptions o;
  o.stage = c.stage;
  o.train_batch_size = kBatch;
  o.precision = c.precision;
  o.check_grad_overflow = c.check_grad_overflow;
  o.gradient_clipping = c.clip;
  o.fp16.initial_scale_power = 8;
  o.fp16.hysteresis = 1;
  o.reduce_bucket_size = 64;
  o.stage3.persistence_threshold = 0;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
  const int64_t micro = engine->batch().micro_batch_size;
  for (int step = 0; step < kSteps; ++step) {
    testing::Batch b = testing::GlobalBatch(ModelKind::kMlp, step, kBatch);
    const int64_t first = rank * micro;
    torch::Tensor loss;
    {
      auto forward = engine->BeginForward();
      loss = testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
      // Only rank 1's gradient of one parameter becomes inf, at kBadStep. Every rank reads that
      // parameter every step: at stage 3 a read on one rank only would be a gather on one rank.
      const bool bad = step == kBadStep && rank == 1;
      loss = loss + testing::UniqueParameters(*net).front().sum().to(torch::kFloat) *
                        (bad ? std::numeric_limits<float>::infinity() : 0.0f);
    }
    ZT_ASSIGN_OR_RETURN(const torch::Tensor before, AllParams(*engine, *net));
    ZT_RETURN_IF_ERROR(engine->Backward(loss));
    ZT_RETURN_IF_ERROR(engine->Step());
    ZT_ASSIGN_OR_RETURN(const torch::Tensor after, AllParams(*engine, *net));
    const bool unchanged = torch::equal(before, after);
    if (unchanged != (step == kBadStep && c.skips())) {
      return absl::InternalError(
          absl::StrCat("step ", step, ": parameters ", unchanged ? "unchanged" : "changed"));
    }
    if (step == kBadStep && !std::isinf(engine->last_grad_norm()) == c.skips()) {
      return absl::InternalError(
          absl::StrCat("grad norm ", engine->last_grad_norm(), " after the overflow step"));
    }
  }
  // Without the check the inf reaches the weights (what the check is for).
  ZT_ASSIGN_OR_RETURN(const torch::Tensor last, AllParams(*engine, *net));
  if (last.isfinite().all().item<bool>() != c.skips()) {
    return absl::InternalError(
        absl::StrCat("final weights finite: ", last.isfinite().all().item<bool>()));
  }
  const int64_t want_skipped = c.skips() ? 1 : 0;
  if (engine->skipped_steps() != want_skipped ||
      engine->optimizer_steps() != kSteps - want_skipped) {
    return absl::InternalError(
        absl::StrCat("skipped ", engine->skipped_steps(), ", took ", engine->optimizer_steps()));
  }
  if (c.precision == Precision::kFloat16 && engine->loss_scale() != 128.0) {
    return absl::InternalError(absl::StrCat("loss scale ", engine->loss_scale(), ", want 128"));
  }
  ZT_ASSIGN_OR_RETURN(const torch::Tensor flat, AllParams(*engine, *net));
  return absl::BytesToHexString(
      absl::string_view(static_cast<const char*>(flat.data_ptr()), flat.nbytes()));
}

class OverflowTest : public ::testing::TestWithParam<OverflowCase> {};

// inf/NaN in one rank's gradients skips the step on every rank: fp16 through its loss scaler,
// bf16 and fp32 through check_grad_overflow; with the check off the inf reaches the weights.
TEST_P(OverflowTest, OverflowOnOneRankSkipsEverywhere) {
  const OverflowCase c = GetParam();
  auto outcomes = SpawnRanks(2, [c](int rank) { return Overflow(c, rank); });
  ASSERT_EQ(outcomes.size(), 2u);
  for (const auto& o : outcomes) ASSERT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
  EXPECT_FALSE(outcomes[0].payload.empty());
  EXPECT_EQ(outcomes[0].payload, outcomes[1].payload) << "ranks ended with different weights";
}

INSTANTIATE_TEST_SUITE_P(
    StagesAndPrecisions, OverflowTest,
    ::testing::Values(OverflowCase{0, Precision::kFloat16}, OverflowCase{2, Precision::kFloat16},
                      OverflowCase{3, Precision::kFloat16}, OverflowCase{1, Precision::kBFloat16},
                      OverflowCase{3, Precision::kBFloat16}, OverflowCase{0, Precision::kFloat32},
                      OverflowCase{2, Precision::kFloat32},
                      OverflowCase{2, Precision::kBFloat16, false},
                      OverflowCase{2, Precision::kBFloat16, false, 1.0}));

}  // namespace
}  // namespace zerotrain::engine
