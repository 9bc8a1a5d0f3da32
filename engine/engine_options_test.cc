// The batch triple (any two give the third; inconsistent values name all four numbers), the
// fingerprint parts that tell ranks apart, and the ZeRO memory formulas.
#include "engine/engine_options.h"

#include "engine/model_state.h"
#include "gtest/gtest.h"

namespace zerotrain::engine {
namespace {

EngineOptions Triple(int64_t train, int64_t micro, int64_t gas) {
  EngineOptions o;
  o.train_batch_size = train;
  o.train_micro_batch_size_per_gpu = micro;
  o.gradient_accumulation_steps = gas;
  return o;
}

void ExpectBatch(const EngineOptions& o, int world, int64_t train, int64_t micro, int64_t gas) {
  auto b = ResolveBatchSizes(o, world);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->train_batch_size, train);
  EXPECT_EQ(b->micro_batch_size, micro);
  EXPECT_EQ(b->gradient_accumulation_steps, gas);
}

TEST(BatchSizes, AnyTwoGiveTheThird) {
  ExpectBatch(Triple(32, 2, 4), 4, 32, 2, 4);
  ExpectBatch(Triple(32, 2, 0), 4, 32, 2, 4);
  ExpectBatch(Triple(32, 0, 4), 4, 32, 2, 4);
  ExpectBatch(Triple(0, 2, 4), 4, 32, 2, 4);
  ExpectBatch(Triple(0, 3, 0), 2, 6, 3, 1);
  ExpectBatch(Triple(12, 0, 0), 3, 12, 4, 1);
}

TEST(BatchSizes, MismatchNamesAllFourNumbers) {
  auto b = ResolveBatchSizes(Triple(30, 2, 4), 4);
  ASSERT_FALSE(b.ok());
  const std::string m(b.status().message());
  for (const char* want : {"train_batch_size=30", "train_micro_batch_size_per_gpu=2",
                           "gradient_accumulation_steps=4", "world_size=4"}) {
    EXPECT_NE(m.find(want), std::string::npos) << m;
  }
  EXPECT_FALSE(ResolveBatchSizes(Triple(30, 4, 0), 4).ok());
  EXPECT_FALSE(ResolveBatchSizes(Triple(30, 0, 4), 4).ok());
  EXPECT_FALSE(ResolveBatchSizes(Triple(0, 0, 4), 4).ok());
  EXPECT_FALSE(ResolveBatchSizes(Triple(-1, 2, 0), 4).ok());
}

TEST(Fingerprint, PartsTellWhatDiffers) {
  const BatchSizes batch{8, 2, 2};
  std::vector<ParamSignature> params = {{"a.weight", {3, 4}, "Float"}, {"a.bias", {3}, "Float"}};
  const Fingerprint base = MakeFingerprint(EngineOptions(), batch, params);
  auto changed_parts = [&](const Fingerprint& f) {
    std::vector<std::string> out;
    for (size_t i = 0; i < f.parts.size(); ++i) {
      if (f.parts[i].second != base.parts[i].second) out.push_back(f.parts[i].first);
    }
    return out;
  };
  EXPECT_TRUE(changed_parts(MakeFingerprint(EngineOptions(), batch, params)).empty());
  EngineOptions staged;
  staged.stage = 2;
  EXPECT_EQ(changed_parts(MakeFingerprint(staged, batch, params)),
            std::vector<std::string>{"engine options"});
  auto shapes = params;
  shapes[0].shape = {4, 3};
  EXPECT_EQ(changed_parts(MakeFingerprint(EngineOptions(), batch, shapes)),
            std::vector<std::string>{"parameter shapes"});
  auto names = params;
  names[1].name = "b.bias";
  EXPECT_EQ(changed_parts(MakeFingerprint(EngineOptions(), batch, names)),
            std::vector<std::string>{"parameter names"});
}

TEST(ZeroFormula, PaperNumbers) {
  // Psi = 7.5B, N = 64: the ZeRO paper's Figure 1 (120 GB, 31.4 GB, 16.6 GB).
  const int64_t psi = 7500000000;
  EXPECT_DOUBLE_EQ(ZeroFormulaBytes(0, true, psi, 64), 120e9);
  EXPECT_NEAR(ZeroFormulaBytes(1, true, psi, 64) / 1e9, 31.4, 0.05);
  EXPECT_NEAR(ZeroFormulaBytes(2, true, psi, 64) / 1e9, 16.6, 0.05);
  EXPECT_DOUBLE_EQ(ZeroFormulaBytes(1, false, 100, 4), 800 + 300);
  EXPECT_DOUBLE_EQ(ZeroFormulaBytes(2, false, 100, 4), 400 + 400);
}

}  // namespace
}  // namespace zerotrain::engine
