// FusedAdamStep against torch::optim::Adam/AdamW and against an independent double-precision
// scalar loop, on every SIMD path this machine supports, with shards that are empty, unaligned
// and not multiples of the vector width.
#include "optim/adam.h"

#include <ATen/Parallel.h>
#include <torch/optim.h>

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "optim/adam_reference.h"
#include "optim/optim_testing.h"
#include "optim/precision.h"

namespace zerotrain::optim {
namespace {

using testing::AllClose;
using testing::kShardSizes;
using testing::RandomNormal;
using testing::ReferenceAdam;

// Shard sizes: empty, odd, several chunks, shorter than one vector, and a plain one.

int64_t Total() {
  int64_t n = 0;
  for (int64_t s : kShardSizes) n += s;
  return n;
}

// fp32 state in one allocation per array, starting one float past the allocation so no shard
// begins on a vector boundary.
struct OurAdam {
  explicit OurAdam(const std::vector<float>& init)
      : params(init.size() + 1),
        grads(init.size() + 1),
        m(init.size() + 1, 0.0f),
        v(init.size() + 1, 0.0f),
        vmax(init.size() + 1, 0.0f) {
    std::copy(init.begin(), init.end(), params.begin() + 1);
  }
  std::vector<AdamShard> Shards(const void* grad_base, DType grad_dtype, void* out,
                                DType out_dtype) {
    std::vector<AdamShard> shards;
    int64_t offset = 0;
    const int gsize = DTypeSize(grad_dtype), osize = DTypeSize(out_dtype);
    for (int64_t size : kShardSizes) {
      AdamShard s;
      s.size = size;
      s.params = params.data() + 1 + offset;
      s.grads = static_cast<const char*>(grad_base) + offset * gsize;
      s.grad_dtype = grad_dtype;
      s.exp_avg = m.data() + 1 + offset;
      s.exp_avg_sq = v.data() + 1 + offset;
      s.max_exp_avg_sq = vmax.data() + 1 + offset;
      s.params_out = out ? static_cast<char*>(out) + offset * osize : nullptr;
      s.params_out_dtype = out_dtype;
      shards.push_back(s);
      offset += size;
    }
    return shards;
  }
  const float* P() const { return params.data() + 1; }
  std::vector<float> params, grads, m, v, vmax;
};

class AdamPathTest : public ::testing::TestWithParam<SimdPath> {
 protected:
  // The LibTorch reference runs on one thread: ATen's pool spins, and on a busy 2-core machine
  // that turns seconds into minutes. Our own kernels still get 2 threads through the options.
  static void SetUpTestSuite() { at::set_num_threads(1); }
};

TEST_P(AdamPathTest, MatchesTorchAdamAndAdamWOver200Steps) {
  const int64_t n = Total();
  const std::vector<float> init = RandomNormal(n, 1);
  for (bool adamw : {false, true}) {
    for (double wd : {0.0, 0.01}) {
      for (bool amsgrad : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "adamw " << adamw << " wd " << wd << " amsgrad " << amsgrad);
        AdamOptions o;
        o.lr = 1e-3, o.adamw = adamw, o.weight_decay = wd, o.amsgrad = amsgrad;
        o.threads = 2, o.simd = GetParam();
        OurAdam ours(init);
        torch::Tensor theirs = torch::from_blob(const_cast<float*>(init.data()), {n}).clone();
        theirs.set_requires_grad(true);
        std::unique_ptr<torch::optim::Optimizer> opt;
        if (adamw) {
          opt = std::make_unique<torch::optim::AdamW>(
              std::vector<torch::Tensor>{theirs},
              torch::optim::AdamWOptions(o.lr).weight_decay(wd).amsgrad(amsgrad));
        } else {
          opt = std::make_unique<torch::optim::Adam>(
              std::vector<torch::Tensor>{theirs},
              torch::optim::AdamOptions(o.lr).weight_decay(wd).amsgrad(amsgrad));
        }
        for (int64_t t = 1; t <= 200; ++t) {
          const std::vector<float> g = RandomNormal(n, 1000 + t);
          std::copy(g.begin(), g.end(), ours.grads.begin() + 1);
          ASSERT_TRUE(FusedAdamStep(o, t,
                                    ours.Shards(ours.grads.data() + 1, DType::kFloat32, nullptr,
                                                DType::kBFloat16))
                          .ok());
          theirs.mutable_grad() = torch::from_blob(const_cast<float*>(g.data()), {n}).clone();
          opt->step();
        }
        torch::Tensor result = theirs.detach().contiguous();
        EXPECT_TRUE(AllClose(ours.P(), result.data_ptr<float>(), n));
      }
    }
  }
}

TEST_P(AdamPathTest, MatchesScalarReferenceWithChangingHyperParameters) {
  const int64_t n = Total();
  const std::vector<float> init = RandomNormal(n, 2);
  for (bool bias_correction : {true, false}) {
    for (bool adamw : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "bias_correction " << bias_correction << " adamw " << adamw);
      OurAdam ours(init);
      ReferenceAdam ref(init);
      AdamOptions o;
      o.bias_correction = bias_correction, o.adamw = adamw, o.amsgrad = true;
      o.simd = GetParam();
      for (int64_t t = 1; t <= 200; ++t) {
        // A schedule: every hyper-parameter moves between steps, and the gradients arrive
        // multiplied by a loss scale that the step divides out.
        o.lr = 1e-3 * (1.0 + 0.5 * std::sin(0.1 * t));
        o.beta1 = 0.85 + 0.0005 * t;
        o.beta2 = 0.99 + 0.00004 * t;
        o.eps = t % 2 ? 1e-8 : 1e-6;
        o.weight_decay = 0.001 * (t % 5);
        o.grad_scale = t % 3 ? 1024.0 : 3.0;
        o.threads = 1 + t % 2;
        std::vector<float> g = RandomNormal(n, 2000 + t, static_cast<float>(o.grad_scale));
        std::copy(g.begin(), g.end(), ours.grads.begin() + 1);
        ASSERT_TRUE(FusedAdamStep(o, t,
                                  ours.Shards(ours.grads.data() + 1, DType::kFloat32, nullptr,
                                              DType::kBFloat16))
                        .ok());
        ref.Step(o, t, g);
      }
      EXPECT_TRUE(AllClose(ours.P(), ReferenceAdam::F(ref.p).data(), n));
      EXPECT_TRUE(AllClose(ours.m.data() + 1, ReferenceAdam::F(ref.m).data(), n));
      EXPECT_TRUE(AllClose(ours.v.data() + 1, ReferenceAdam::F(ref.v).data(), n));
      EXPECT_TRUE(AllClose(ours.vmax.data() + 1, ReferenceAdam::F(ref.vmax).data(), n));
    }
  }
}

// Converts with LibTorch's own c10 types, independent of precision.h.
std::vector<uint16_t> TorchLowPrecision(const std::vector<float>& x, DType dtype) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = dtype == DType::kBFloat16 ? c10::BFloat16(x[i]).x : c10::Half(x[i]).x;
  }
  return out;
}

float TorchToFloat(uint16_t bits, DType dtype) {
  if (dtype == DType::kBFloat16) {
    return static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()));
  }
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

TEST_P(AdamPathTest, EveryGradientAndCopyPrecision) {
  const int64_t n = Total();
  const std::vector<float> init = RandomNormal(n, 3);
  for (DType grad_dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (int out_kind = 0; out_kind < 4; ++out_kind) {
      const bool has_out = out_kind > 0;
      const DType out_dtype = out_kind == 1   ? DType::kFloat32
                              : out_kind == 2 ? DType::kBFloat16
                                              : DType::kFloat16;
      SCOPED_TRACE(::testing::Message() << "grads " << DTypeName(grad_dtype) << " copy "
                                        << (has_out ? DTypeName(out_dtype) : "none"));
      OurAdam ours(init);
      ReferenceAdam ref(init);
      AdamOptions o;
      o.adamw = true, o.weight_decay = 0.01, o.simd = GetParam(), o.threads = 2;
      std::vector<float> out_f32(n);
      std::vector<uint16_t> out_16(n);
      void* out = !has_out                       ? nullptr
                  : out_dtype == DType::kFloat32 ? static_cast<void*>(out_f32.data())
                                                 : static_cast<void*>(out_16.data());
      for (int64_t t = 1; t <= 50; ++t) {
        std::vector<float> g = RandomNormal(n, 3000 + t);
        std::vector<uint16_t> low;
        const void* grads = g.data();
        if (grad_dtype != DType::kFloat32) {
          low = TorchLowPrecision(g, grad_dtype);
          for (int64_t i = 0; i < n; ++i) g[i] = TorchToFloat(low[i], grad_dtype);
          grads = low.data();
        }
        ASSERT_TRUE(FusedAdamStep(o, t, ours.Shards(grads, grad_dtype, out, out_dtype)).ok());
        ref.Step(o, t, g);
      }
      EXPECT_TRUE(AllClose(ours.P(), ReferenceAdam::F(ref.p).data(), n));
      if (!has_out) continue;
      const std::vector<float> mine(ours.P(), ours.P() + n);
      if (out_dtype == DType::kFloat32) {
        EXPECT_EQ(out_f32, mine);
      } else {
        EXPECT_EQ(out_16, TorchLowPrecision(mine, out_dtype));  // bit-exact nearest-even
      }
    }
  }
}

TEST_P(AdamPathTest, ThreadCountDoesNotChangeTheResult) {
  const int64_t n = Total();
  const std::vector<float> init = RandomNormal(n, 4);
  const std::vector<float> g = RandomNormal(n, 5);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 7}) {
    OurAdam ours(init);
    std::copy(g.begin(), g.end(), ours.grads.begin() + 1);
    AdamOptions o;
    o.threads = threads, o.simd = GetParam();
    for (int64_t t = 1; t <= 3; ++t) {
      ASSERT_TRUE(
          FusedAdamStep(
              o, t, ours.Shards(ours.grads.data() + 1, DType::kFloat32, nullptr, DType::kBFloat16))
              .ok());
    }
    results.emplace_back(ours.P(), ours.P() + n);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  EXPECT_NE(results[0], init);
}

INSTANTIATE_TEST_SUITE_P(SupportedPaths, AdamPathTest, ::testing::ValuesIn(SupportedSimdPaths()),
                         [](const ::testing::TestParamInfo<SimdPath>& info) {
                           return testing::PathLabel(info.param);
                         });

TEST(AdamTest, RejectsBadOptionsAndShardsWithContext) {
  float p = 0, g = 0, m = 0, v = 0;
  AdamShard ok{1, &p, &g, DType::kFloat32, &m, &v};
  AdamOptions o;
  EXPECT_TRUE(FusedAdamStep(o, 1, ok).ok());
  absl::Status s = FusedAdamStep(o, 0, ok);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("step = 0"), std::string::npos) << s;
  o.beta1 = 1.5;
  s = FusedAdamStep(o, 1, ok);
  EXPECT_NE(s.message().find("AdamOptions.beta1 = 1.5"), std::string::npos) << s;
  o = AdamOptions();
  o.grad_scale = 0;
  EXPECT_NE(FusedAdamStep(o, 1, ok).message().find("grad_scale"), std::string::npos);
  o = AdamOptions();
  o.amsgrad = true;
  s = FusedAdamStep(o, 1, ok);
  EXPECT_NE(s.message().find("AdamShard[0].max_exp_avg_sq"), std::string::npos) << s;
  AdamShard no_grads = ok;
  no_grads.grads = nullptr;
  const AdamShard two[] = {ok, no_grads};
  s = FusedAdamStep(AdamOptions(), 1, two);
  EXPECT_NE(s.message().find("AdamShard[1].grads is null"), std::string::npos) << s;
  // An empty shard needs no buffers at all.
  AdamShard empty;
  EXPECT_TRUE(FusedAdamStep(AdamOptions(), 1, empty).ok());
  EXPECT_TRUE(FusedAdamStep(AdamOptions(), 1, absl::Span<const AdamShard>()).ok());
}

}  // namespace
}  // namespace zerotrain::optim
