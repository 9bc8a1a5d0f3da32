// FusedSgdStep against torch::optim::SGD and an independent double-precision scalar loop, on
// every SIMD path this machine supports, over unaligned shards of awkward lengths.
#include "optim/sgd.h"

#include <ATen/Parallel.h>
#include <torch/optim.h>

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

// Buffers start one float past their allocation so no shard is vector-aligned.
struct OurSgd {
  explicit OurSgd(const std::vector<float>& init)
      : params(kTotal + 1), grads(kTotal + 1), buf(kTotal + 1, 0.0f), out(kTotal + 1) {
    std::copy(init.begin(), init.end(), params.begin() + 1);
  }
  std::vector<SgdShard> Shards(const void* grad_base, DType grad_dtype, bool with_out) {
    std::vector<SgdShard> shards;
    int64_t offset = 0;
    for (int64_t size : kShardSizes) {
      SgdShard s;
      s.size = size;
      s.params = params.data() + 1 + offset;
      s.grads = static_cast<const char*>(grad_base) + offset * DTypeSize(grad_dtype);
      s.grad_dtype = grad_dtype;
      s.momentum_buffer = buf.data() + 1 + offset;
      s.params_out = with_out ? out.data() + 1 + offset : nullptr;
      s.params_out_dtype = DType::kFloat16;
      shards.push_back(s);
      offset += size;
    }
    return shards;
  }
  const float* P() const { return params.data() + 1; }
  std::vector<float> params, grads, buf;
  std::vector<uint16_t> out;
};

void ReferenceSgdStep(const SgdOptions& o, int64_t t, const std::vector<float>& grads,
                      std::vector<double>& p, std::vector<double>& buf) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = grads[i] / o.grad_scale + o.weight_decay * p[i];
    if (o.momentum != 0.0) {
      buf[i] = t == 1 ? d : o.momentum * buf[i] + (1.0 - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= o.lr * d;
  }
}

struct Config {
  double momentum, dampening, weight_decay;
  bool nesterov;
};
const Config kConfigs[] = {
    {0.0, 0.0, 0.0, false},
    {0.9, 0.0, 0.0, false},
    {0.9, 0.1, 0.01, false},
    {0.9, 0.0, 0.01, true},
};

class SgdPathTest : public ::testing::TestWithParam<SimdPath> {
 protected:
  // The LibTorch reference runs on one thread: ATen's pool spins, and on a busy 2-core machine
  // that turns seconds into minutes. Our own kernels still get 2 threads through the options.
  static void SetUpTestSuite() { at::set_num_threads(1); }
};

TEST_P(SgdPathTest, MatchesTorchSgdOver200Steps) {
  const std::vector<float> init = RandomNormal(kTotal, 11);
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(::testing::Message() << "momentum " << c.momentum << " dampening " << c.dampening
                                      << " wd " << c.weight_decay << " nesterov " << c.nesterov);
    SgdOptions o;
    o.lr = 1e-3, o.momentum = c.momentum, o.dampening = c.dampening;
    o.weight_decay = c.weight_decay, o.nesterov = c.nesterov, o.threads = 2, o.simd = GetParam();
    OurSgd ours(init);
    torch::Tensor theirs = torch::from_blob(const_cast<float*>(init.data()), {kTotal}).clone();
    theirs.set_requires_grad(true);
    torch::optim::SGD opt({theirs}, torch::optim::SGDOptions(o.lr)
                                        .momentum(c.momentum)
                                        .dampening(c.dampening)
                                        .weight_decay(c.weight_decay)
                                        .nesterov(c.nesterov));
    for (int64_t t = 1; t <= 200; ++t) {
      const std::vector<float> g = RandomNormal(kTotal, 100 + t);
      std::copy(g.begin(), g.end(), ours.grads.begin() + 1);
      ASSERT_TRUE(
          FusedSgdStep(o, t, ours.Shards(ours.grads.data() + 1, DType::kFloat32, false)).ok());
      theirs.mutable_grad() = torch::from_blob(const_cast<float*>(g.data()), {kTotal}).clone();
      opt.step();
    }
    EXPECT_TRUE(AllClose(ours.P(), theirs.detach().contiguous().data_ptr<float>(), kTotal));
  }
}

TEST_P(SgdPathTest, MatchesScalarReferenceWithLowPrecisionGradientsAndCopy) {
  const std::vector<float> init = RandomNormal(kTotal, 12);
  for (DType grad_dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(grad_dtype));
    OurSgd ours(init);
    std::vector<double> p(init.begin(), init.end()), buf(kTotal);
    SgdOptions o;
    o.momentum = 0.8, o.dampening = 0.2, o.weight_decay = 1e-3, o.simd = GetParam();
    for (int64_t t = 1; t <= 200; ++t) {
      o.lr = 1e-3 / t;                 // hyper-parameters may change between steps
      o.grad_scale = t % 2 ? 256 : 1;  // unscaling is fused into the step
      std::vector<float> g = RandomNormal(kTotal, 200 + t, static_cast<float>(o.grad_scale));
      std::vector<uint16_t> low(kTotal);
      for (int64_t i = 0; i < kTotal; ++i) {
        if (grad_dtype == DType::kBFloat16) {
          c10::BFloat16 b(g[i]);
          low[i] = b.x;
          g[i] = static_cast<float>(b);
        } else if (grad_dtype == DType::kFloat16) {
          c10::Half h(g[i]);
          low[i] = h.x;
          g[i] = static_cast<float>(h);
        }
      }
      const void* grads = grad_dtype == DType::kFloat32 ? static_cast<const void*>(g.data())
                                                        : static_cast<const void*>(low.data());
      ASSERT_TRUE(FusedSgdStep(o, t, ours.Shards(grads, grad_dtype, true)).ok());
      ReferenceSgdStep(o, t, g, p, buf);
    }
    const std::vector<float> expected(p.begin(), p.end());
    EXPECT_TRUE(AllClose(ours.P(), expected.data(), kTotal));
    for (int64_t i = 0; i < kTotal; ++i) {
      ASSERT_EQ(ours.out[i + 1], c10::Half(ours.P()[i]).x) << "fp16 copy of element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SupportedPaths, SgdPathTest, ::testing::ValuesIn(SupportedSimdPaths()),
                         [](const ::testing::TestParamInfo<SimdPath>& info) {
                           return testing::PathLabel(info.param);
                         });

TEST(SgdTest, RejectsBadOptionsWithContext) {
  float p = 0, g = 0;
  SgdShard shard{1, &p, &g};
  SgdOptions o;
  o.nesterov = true;
  absl::Status s = FusedSgdStep(o, 1, shard);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nesterov"), std::string::npos) << s;
  o = SgdOptions();
  o.momentum = 0.9;  // needs a momentum buffer
  s = FusedSgdStep(o, 1, shard);
  EXPECT_NE(s.message().find("SgdShard[0].momentum_buffer"), std::string::npos) << s;
  o = SgdOptions();
  o.lr = -1;
  EXPECT_NE(FusedSgdStep(o, 1, shard).message().find("SgdOptions.lr = -1"), std::string::npos);
  EXPECT_TRUE(FusedSgdStep(SgdOptions(), 1, shard).ok());
  EXPECT_FLOAT_EQ(p, 0.0f);
}

}  // namespace
}  // namespace zerotrain::optim
