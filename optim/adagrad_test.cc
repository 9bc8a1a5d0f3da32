// FusedAdagradStep against torch::optim::Adagrad and an independent double-precision scalar
// loop, on every SIMD path this machine supports, over unaligned shards of awkward lengths.
#include "optim/adagrad.h"

#include <ATen/Parallel.h>
#include <torch/optim.h>

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "optim/optim_testing.h"
#include "optim/precision.h"

namespace zerotrain::optim {
namespace {

using testing::AllClose;
using testing::kShardSizes;
using testing::kTotal;
using testing::RandomNormal;

struct OurAdagrad {
  OurAdagrad(const std::vector<float>& init, float initial_accumulator)
      : params(kTotal + 1),
        grads(kTotal + 1),
        sum(kTotal + 1, initial_accumulator),
        out(kTotal + 1) {
    std::copy(init.begin(), init.end(), params.begin() + 1);
  }
  std::vector<AdagradShard> Shards(const void* grad_base, DType grad_dtype) {
    std::vector<AdagradShard> shards;
    int64_t offset = 0;
    for (int64_t size : kShardSizes) {
      AdagradShard s;
      s.size = size;
      s.params = params.data() + 1 + offset;
      s.grads = static_cast<const char*>(grad_base) + offset * DTypeSize(grad_dtype);
      s.grad_dtype = grad_dtype;
      s.sum = sum.data() + 1 + offset;
      s.params_out = out.data() + 1 + offset;
      s.params_out_dtype = DType::kBFloat16;
      shards.push_back(s);
      offset += size;
    }
    return shards;
  }
  const float* P() const { return params.data() + 1; }
  std::vector<float> params, grads, sum;
  std::vector<uint16_t> out;
};

class AdagradPathTest : public ::testing::TestWithParam<SimdPath> {
 protected:
  // The LibTorch reference runs on one thread: ATen's pool spins, and on a busy 2-core machine
  // that turns seconds into minutes. Our own kernels still get 2 threads through the options.
  static void SetUpTestSuite() { at::set_num_threads(1); }
};

TEST_P(AdagradPathTest, MatchesTorchAdagradOver200Steps) {
  const std::vector<float> init = RandomNormal(kTotal, 21);
  for (double wd : {0.0, 0.01}) {
    for (double lr_decay : {0.0, 0.01}) {
      SCOPED_TRACE(::testing::Message() << "wd " << wd << " lr_decay " << lr_decay);
      AdagradOptions o;
      o.weight_decay = wd, o.lr_decay = lr_decay, o.threads = 2, o.simd = GetParam();
      OurAdagrad ours(init, 0.1f);
      torch::Tensor theirs = torch::from_blob(const_cast<float*>(init.data()), {kTotal}).clone();
      theirs.set_requires_grad(true);
      torch::optim::Adagrad opt({theirs}, torch::optim::AdagradOptions(o.lr)
                                              .lr_decay(lr_decay)
                                              .weight_decay(wd)
                                              .initial_accumulator_value(0.1)
                                              .eps(o.eps));
      for (int64_t t = 1; t <= 200; ++t) {
        const std::vector<float> g = RandomNormal(kTotal, 300 + t);
        std::copy(g.begin(), g.end(), ours.grads.begin() + 1);
        ASSERT_TRUE(
            FusedAdagradStep(o, t, ours.Shards(ours.grads.data() + 1, DType::kFloat32)).ok());
        theirs.mutable_grad() = torch::from_blob(const_cast<float*>(g.data()), {kTotal}).clone();
        opt.step();
      }
      EXPECT_TRUE(AllClose(ours.P(), theirs.detach().contiguous().data_ptr<float>(), kTotal));
      for (int64_t i = 0; i < kTotal; ++i) {
        ASSERT_EQ(ours.out[i + 1], c10::BFloat16(ours.P()[i]).x) << "bf16 copy of element " << i;
      }
    }
  }
}

TEST_P(AdagradPathTest, MatchesScalarReferenceWithBf16Gradients) {
  const std::vector<float> init = RandomNormal(kTotal, 22);
  OurAdagrad ours(init, 0.0f);
  std::vector<double> p(init.begin(), init.end()), sum(kTotal);
  AdagradOptions o;
  o.lr_decay = 0.05, o.weight_decay = 1e-3, o.grad_scale = 64, o.simd = GetParam();
  for (int64_t t = 1; t <= 200; ++t) {
    o.lr = 0.02 / (1 + t % 7);
    std::vector<float> g = RandomNormal(kTotal, 400 + t, 64.0f);
    std::vector<uint16_t> low(kTotal);
    for (int64_t i = 0; i < kTotal; ++i) {
      low[i] = c10::BFloat16(g[i]).x;
      g[i] = static_cast<float>(c10::BFloat16(low[i], c10::BFloat16::from_bits()));
    }
    ASSERT_TRUE(FusedAdagradStep(o, t, ours.Shards(low.data(), DType::kBFloat16)).ok());
    const double clr = o.lr / (1.0 + (t - 1) * o.lr_decay);
    for (int64_t i = 0; i < kTotal; ++i) {
      const double gi = g[i] / o.grad_scale + o.weight_decay * p[i];
      sum[i] += gi * gi;
      p[i] -= clr * gi / (std::sqrt(sum[i]) + o.eps);
    }
  }
  const std::vector<float> expected(p.begin(), p.end());
  EXPECT_TRUE(AllClose(ours.P(), expected.data(), kTotal));
  const std::vector<float> expected_sum(sum.begin(), sum.end());
  EXPECT_TRUE(AllClose(ours.sum.data() + 1, expected_sum.data(), kTotal));
}

INSTANTIATE_TEST_SUITE_P(SupportedPaths, AdagradPathTest, ::testing::ValuesIn(SupportedSimdPaths()),
                         [](const ::testing::TestParamInfo<SimdPath>& info) {
                           return testing::PathLabel(info.param);
                         });

TEST(AdagradTest, RejectsBadOptionsWithContext) {
  float p = 0, g = 0, sum = 0;
  AdagradShard shard{1, &p, &g, DType::kFloat32, &sum};
  AdagradOptions o;
  o.eps = -1;
  EXPECT_NE(FusedAdagradStep(o, 1, shard).message().find("AdagradOptions.eps = -1"),
            std::string::npos);
  shard.sum = nullptr;
  EXPECT_NE(FusedAdagradStep(AdagradOptions(), 1, shard).message().find("AdagradShard[0].sum"),
            std::string::npos);
}

}  // namespace
}  // namespace zerotrain::optim
