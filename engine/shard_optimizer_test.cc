// The built-in ShardOptimizers: the hyperparameter setters the trainer's schedules drive between
// steps (Adam's betas change the next step, checked against a scalar Adam loop; SGD, which has
// none, refuses them), LAMB's two passes over a cut tensor and Adagrad's initial state.
#include "engine/shard_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zerotrain::engine {
namespace {

// torch.optim.AdamW's update for one element, in double.
struct ScalarAdamW {
  double param, m = 0, v = 0;
  void Step(int t, double grad, double lr, double b1, double b2, double eps, double wd) {
    param *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * grad;
    v = b2 * v + (1 - b2) * grad * grad;
    const double m_hat = m / (1 - std::pow(b1, t)), v_hat = v / (1 - std::pow(b2, t));
    param -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
};

TEST(ShardOptimizer, AdamBetasSetBetweenStepsTakeEffect) {
  optim::AdamOptions o;
  o.adamw = true;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  auto adam = MakeAdamShardOptimizer(o);
  std::vector<float> master = {1.0f, -2.0f, 0.5f}, exp_avg(3, 0), exp_avg_sq(3, 0);
  const std::vector<float> grads = {0.3f, -0.7f, 0.2f};
  ShardState shard;
  shard.numel = 3;
  shard.master = master.data();
  shard.state = {exp_avg.data(), exp_avg_sq.data()};
  ShardSegment seg;
  seg.size = 3;
  seg.grads = grads.data();
  std::vector<ScalarAdamW> want = {{1.0}, {-2.0}, {0.5}};
  const double betas[3][2] = {{0.9, 0.999}, {0.85, 0.99}, {0.8, 0.95}};
  for (int t = 1; t <= 3; ++t) {
    if (t > 1) {
      ASSERT_TRUE(adam->set_betas(betas[t - 1][0], betas[t - 1][1]).ok());
    }
    ASSERT_TRUE(adam->Step(t, 1.0, shard, {&seg, 1}).ok());
    for (int i = 0; i < 3; ++i) {
      want[i].Step(t, grads[i], o.lr, betas[t - 1][0], betas[t - 1][1], o.eps, o.weight_decay);
      EXPECT_NEAR(master[i], want[i].param, 1e-6) << "step " << t << " element " << i;
    }
  }
}

TEST(ShardOptimizer, SgdHasNoBetas) {
  auto sgd = MakeSgdShardOptimizer(optim::SgdOptions());
  const absl::Status s = sgd->set_betas(0.9, 0.99);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("SGD has no betas"), std::string::npos) << s;
}

// LAMB's two passes with a tensor cut into two segments (as sub-groups and ranks cut it) give
// what FusedLambStep gives for the whole tensor, once the segments share their tensor's sums.
TEST(ShardOptimizer, LambSegmentsOfOneTensorShareItsTrustRatio) {
  optim::LambOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  auto lamb = MakeLambShardOptimizer(o);
  ASSERT_EQ(lamb->tensor_sums(), 2);
  std::vector<float> master = {1.0f, -2.0f, 0.5f, 3.0f}, m(4, 0), v(4, 0);
  std::vector<float> whole = master, whole_m(4, 0), whole_v(4, 0);
  const std::vector<float> grads = {0.3f, -0.7f, 0.2f, 0.1f};
  ShardState shard;
  shard.numel = 4;
  shard.master = master.data();
  shard.state = {m.data(), v.data()};
  for (int t = 1; t <= 3; ++t) {
    double sums[2] = {0, 0};
    ShardSegment segs[2];
    for (int i = 0; i < 2; ++i) {
      segs[i].offset = 2 * i;
      segs[i].size = 2;
      segs[i].grads = grads.data() + 2 * i;
      segs[i].tensor_sums = sums;
    }
    ASSERT_TRUE(lamb->AddTensorSums(t, 1.0, shard, segs).ok());
    ASSERT_TRUE(lamb->Step(t, 1.0, shard, segs).ok());
    const optim::LambShard w{
        4, whole.data(), grads.data(), optim::DType::kFloat32, whole_m.data(), whole_v.data()};
    ASSERT_TRUE(optim::FusedLambStep(o, t, {&w, 1}).ok());
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(master[i], whole[i]) << "step " << t << " " << i;
  }
  ShardSegment no_sums;
  no_sums.size = 1;
  no_sums.grads = grads.data();
  EXPECT_FALSE(lamb->Step(4, 1.0, shard, {&no_sums, 1}).ok());
}

TEST(ShardOptimizer, AdagradStateStartsAtInitialAccumulator) {
  auto adagrad = MakeAdagradShardOptimizer(optim::AdagradOptions(), 0.25);
  EXPECT_EQ(adagrad->state_names(), std::vector<std::string>{"sum"});
  EXPECT_EQ(adagrad->initial_state(), std::vector<float>{0.25f});
  EXPECT_EQ(adagrad->tensor_sums(), 0);
  EXPECT_EQ(MakeSgdShardOptimizer(optim::SgdOptions())->initial_state(), std::vector<float>{});
}

}  // namespace
}  // namespace zerotrain::engine
