// Engine errors for bad input (no trainable parameters, Float64 parameters, mixed dtypes at
// stage 3, a parameter without a gradient, Step
// before Backward, ranks that disagree on model or options, inconsistent batch sizes), the
// broadcast of rank 0's initial parameters, and the optimizer extension point.
#include <torch/types.h>

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

struct WithUnused : torch::nn::Module {
  WithUnused() {
    used = register_module("used", torch::nn::Linear(3, 2));
    unused = register_module("unused", torch::nn::Linear(3, 2));
  }
  torch::nn::Linear used{nullptr}, unused{nullptr};
};

absl::Status Expect(const absl::Status& s, absl::StatusCode code, const std::string& needle) {
  if (s.code() == code && s.message().find(needle) != std::string::npos) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("wanted ", absl::StatusCodeToString(code), " with '",
                                          needle, "', got ", s.ToString()));
}

EngineOptions Basic() {
  EngineOptions o;
  o.train_micro_batch_size_per_gpu = 2;
  return o;
}

absl::StatusOr<std::string> BadInputs() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  torch::nn::Linear frozen(3, 2);
  for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  ZT_RETURN_IF_ERROR(Expect(Engine::Create(*frozen, Basic(), group.get()).status(),
                            absl::StatusCode::kInvalidArgument, "no trainable parameters"));

  EngineOptions bad_batch = Basic();
  bad_batch.train_batch_size = 7;
  bad_batch.gradient_accumulation_steps = 2;
  ZT_RETURN_IF_ERROR(Expect(Engine::Create(*frozen, bad_batch, group.get()).status(),
                            absl::StatusCode::kInvalidArgument, "train_batch_size=7"));

  // Float64 parameters: the optimizer kernels would read them as float32.
  torch::nn::Linear wide(3, 2);
  wide->to(torch::kDouble);
  ZT_RETURN_IF_ERROR(Expect(Engine::Create(*wide, Basic(), group.get()).status(),
                            absl::StatusCode::kInvalidArgument, "is Double; the engine trains"));
  // Mixed dtypes are one flat buffer each at stages 0-2; stage 3's sharded layout takes one.
  auto mixed = testing::MakeNet(testing::ModelKind::kMixedMlp);
  EngineOptions stage3 = Basic();
  stage3.stage = 3;
  ZT_RETURN_IF_ERROR(Expect(Engine::Create(*mixed, stage3, group.get()).status(),
                            absl::StatusCode::kUnimplemented, "stage 3"));

  for (bool ignore : {false, true}) {
    for (int stage : {0, 2}) {
      auto net = std::make_shared<WithUnused>();
      EngineOptions o = Basic();
      o.stage = stage;
      o.ignore_unused_parameters = ignore;
      ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group.get()));
      ZT_RETURN_IF_ERROR(
          Expect(engine->Step(), absl::StatusCode::kFailedPrecondition, "no Backward()"));
      const torch::Tensor before = net->unused->weight.detach().clone();
      absl::Status s = engine->Backward(net->used(torch::ones({2, 3})).sum());
      if (!ignore) {
        ZT_RETURN_IF_ERROR(Expect(s, absl::StatusCode::kFailedPrecondition, "unused.weight"));
        continue;
      }
      ZT_RETURN_IF_ERROR(s);
      ZT_RETURN_IF_ERROR(engine->Step());
      // A zero gradient with AdamW still decays the weight a little, but Adam's update is 0.
      if (!torch::allclose(net->unused->weight, before * (1 - 1e-3 * 0.01), 0, 1e-7)) {
        return absl::InternalError("unused parameter moved by more than weight decay");
      }
    }
  }
  return std::string("ok");
}

TEST(EngineChecks, BadInputsAreClearErrors) {
  auto outcomes = SpawnRanks(1, [](int) { return BadInputs(); });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

absl::StatusOr<std::string> MismatchedRanks(int rank) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  torch::nn::Linear net(4, rank == 0 ? 5 : 6);
  ZT_RETURN_IF_ERROR(Expect(Engine::Create(*net, Basic(), group.get()).status(),
                            absl::StatusCode::kFailedPrecondition, "parameter shapes"));
  // A rank that fails its own checks does not leave the others waiting: they fail too, at once.
  torch::nn::Linear maybe_frozen(4, 5);
  if (rank == 1) {
    for (auto& p : maybe_frozen->parameters()) p.set_requires_grad(false);
  }
  ZT_RETURN_IF_ERROR(
      Expect(Engine::Create(*maybe_frozen, Basic(), group.get()).status(),
             rank == 1 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kFailedPrecondition,
             rank == 1 ? "no trainable parameters" : "rank(s) 1 failed"));
  torch::nn::Linear same(4, 5);
  EngineOptions o = Basic();
  o.stage = rank == 0 ? 1 : 2;
  ZT_RETURN_IF_ERROR(Expect(Engine::Create(*same, o, group.get()).status(),
                            absl::StatusCode::kFailedPrecondition, "engine options"));
  return std::string("ok");
}

TEST(EngineChecks, MismatchedRanksNameWhatDiffers) {
  auto outcomes = SpawnRanks(2, MismatchedRanks);
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// A trainable layer, a frozen one, and a float and a bool buffer, drawn from `seed`.
struct WithFrozen : torch::nn::Module {
  explicit WithFrozen(uint64_t seed) {
    torch::manual_seed(seed);
    trained = register_module("trained", torch::nn::Linear(4, 5));
    frozen = register_module("frozen", torch::nn::Linear(5, 3));
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
    stats = register_buffer("stats", torch::randn({7}));
    mask = register_buffer("mask", torch::rand({64}) > 0.5);
  }
  torch::nn::Linear trained{nullptr}, frozen{nullptr};
  torch::Tensor stats, mask;
};

// Ranks that initialised their modules differently (another seed each) start from rank 0's
// parameters, frozen ones and buffers (bool included) too, as with DDP; at stages 1 and 3.
TEST(EngineChecks, RanksStartFromRankZerosParameters) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    for (int stage : {1, 3}) {
      WithFrozen rank0(100);  // rank 0's seed below
      WithFrozen net(100 + rank);
      if (rank == 1 && torch::equal(net.mask, rank0.mask)) {
        return absl::InternalError("the seeds drew the same mask: the check would be vacuous");
      }
      EngineOptions o = Basic();
      o.stage = stage;
      ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(net, o, group.get()));
      const bool same_frozen = torch::equal(net.frozen->weight, rank0.frozen->weight) &&
                               torch::equal(net.frozen->bias, rank0.frozen->bias) &&
                               torch::equal(net.stats, rank0.stats) &&
                               torch::equal(net.mask, rank0.mask);
      // Stage 3 shards the trainable layer (shape [0] outside a forward scope).
      const bool same_trained =
          stage == 3 || (torch::equal(net.trained->weight, rank0.trained->weight) &&
                         torch::equal(net.trained->bias, rank0.trained->bias));
      if (!same_frozen || !same_trained) {
        return absl::InternalError(absl::StrCat("stage ", stage, ": rank ", rank, " kept its own ",
                                                same_frozen ? "trainable" : "frozen or buffer",
                                                " initialisation"));
      }
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// The optimizer extension point: a hand-written plain SGD plugged in through optimizer_factory
// and the built-in SGD both give p - lr * (full-batch gradient) after one stage-2 step on 2 ranks.
class PlainSgd : public ShardOptimizer {
 public:
  explicit PlainSgd(int* steps) : steps_(steps) {}
  std::string name() const override { return "plain SGD"; }
  std::vector<std::string> state_names() const override { return {}; }
  absl::Status Step(int64_t step, double grad_scale, const ShardState& shard,
                    absl::Span<const ShardSegment> segments) override {
    for (const ShardSegment& s : segments) {
      if (s.grad_dtype != optim::DType::kFloat32) return absl::InternalError("want fp32 grads");
      const float* g = static_cast<const float*>(s.grads);
      float* master = shard.master + (s.offset - shard.begin);
      for (int64_t i = 0; i < s.size; ++i) {
        master[i] -= static_cast<float>(0.1 * g[i] / grad_scale);
        if (s.params_out != nullptr) static_cast<float*>(s.params_out)[i] = master[i];
      }
    }
    ++*steps_;
    return absl::OkStatus();
  }
  void set_lr(double) override {}

 private:
  int* steps_;
};

absl::Status CheckOneSgdStep(bool custom, comm::ProcessGroup* group) {
  auto net = testing::MakeNet(testing::ModelKind::kMlp);
  auto ref = testing::MakeNet(testing::ModelKind::kMlp);
  int custom_steps = 0;
  EngineOptions o;
  o.stage = 2;
  o.train_batch_size = 8;
  o.reduce_bucket_size = 64;
  o.optimizer = OptimizerKind::kSgd;
  o.sgd.lr = 0.1;
  if (custom) o.optimizer_factory = [&] { return std::make_unique<PlainSgd>(&custom_steps); };
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, o, group));
  testing::Batch b = testing::GlobalBatch(testing::ModelKind::kMlp, 0, 8);
  const int64_t micro = 8 / group->world_size();
  const int64_t first = group->rank() * micro;
  ZT_RETURN_IF_ERROR(engine->Backward(
      testing::Loss(*net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro))));
  ZT_RETURN_IF_ERROR(engine->Step());
  testing::Loss(*ref, b.x, b.y).backward();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : ref->parameters()) p.sub_(0.1 * p.grad());
  }
  const std::string diff = testing::CompareParams(*net, *ref, 1e-6, 1e-5);
  if (!diff.empty())
    return absl::InternalError(absl::StrCat(custom ? "custom" : "built-in", " SGD: ", diff));
  if (custom && custom_steps != 1) return absl::InternalError("custom optimizer not used");
  return absl::OkStatus();
}

TEST(EngineChecks, CustomOptimizerThroughFactory) {
  auto outcomes = SpawnRanks(2, [](int) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
    for (bool custom : {true, false}) ZT_RETURN_IF_ERROR(CheckOneSgdStep(custom, group.get()));
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine
