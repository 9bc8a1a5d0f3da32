// The batch triple (any two give the third; inconsistent values name all four numbers), the
// options-only checks (ValidateEngineOptions), the fingerprint parts that tell ranks apart, and
// the ZeRO memory formulas.
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

void ExpectRefused(const EngineOptions& o, absl::StatusCode code, const std::string& says) {
  const absl::Status s = ValidateEngineOptions(o);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(std::string(s.message()).find(says), std::string::npos) << s;
}

TEST(ValidateEngineOptions, EachCheckNamesItsOptionAndValue) {
  EXPECT_TRUE(ValidateEngineOptions(EngineOptions()).ok());
  const auto bad = absl::StatusCode::kInvalidArgument;
  EngineOptions o;
  o.stage = 4;
  ExpectRefused(o, bad, "stage 4 (ZeRO stages are 0, 1, 2 and 3)");
  o = EngineOptions();
  o.stage = 0;
  o.offload_optimizer.device = OffloadDevice::kCpu;
  ExpectRefused(o, bad, "offload_optimizer cpu needs ZeRO stage 1-3");
  o = EngineOptions();
  o.stage = 2;
  o.offload_param.device = OffloadDevice::kNvme;
  ExpectRefused(o, bad, "offload_param nvme needs ZeRO stage 3 (stage is 2)");
  o = EngineOptions();
  o.device = c10::Device(c10::kMeta);
  ExpectRefused(o, bad, "device meta (the engine runs on cpu or cuda)");
  o = EngineOptions();
  o.device = c10::Device(c10::kCUDA, 0);
  o.optimizer = OptimizerKind::kSgd;
  ExpectRefused(o, absl::StatusCode::kUnimplemented, "SGD has no CUDA kernel");
  o.offload_optimizer.device = OffloadDevice::kCpu;  // the host kernel steps it there
  o.stage = 1;
  EXPECT_TRUE(ValidateEngineOptions(o).ok());
  o = EngineOptions();
  o.keep_last_checkpoints = -1;
  ExpectRefused(o, bad, "keep_last_checkpoints is -1");
  o = EngineOptions();
  o.precision = Precision::kFloat16;
  o.fp16.hysteresis = 0;
  ExpectRefused(o, bad, "fp16: hysteresis = 0 must be >= 1");
  o.precision = Precision::kFloat32;  // unused then, and still a mistake
  ExpectRefused(o, bad, "fp16: hysteresis = 0 must be >= 1");
}

TEST(ValidateEngineOptions, ASchedulesOwnChecksAndCycledMomentumWithoutBetas) {
  EngineOptions o;
  optim::OneCycleOptions cycle;
  cycle.cycle_min_lr = 0.001;
  cycle.cycle_max_lr = 0.01;
  o.lr_schedule = cycle;
  o.optimizer = OptimizerKind::kAdam;
  EXPECT_TRUE(ValidateEngineOptions(o).ok());
  EXPECT_TRUE(HasBetas(OptimizerKind::kLamb));
  o.optimizer = OptimizerKind::kSgd;
  ExpectRefused(o, absl::StatusCode::kInvalidArgument,
                "lr_schedule cycles momentum (OneCycle's cycle_momentum), but SGD has no betas");
  cycle.cycle_momentum = false;
  o.lr_schedule = cycle;
  EXPECT_TRUE(ValidateEngineOptions(o).ok());
  cycle.cycle_first_step_size = 0;
  o.lr_schedule = cycle;
  ExpectRefused(o, absl::StatusCode::kInvalidArgument, "lr_schedule: ");
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
