// ValidateConfig: how each section maps onto the module options, and one clear error (field and
// value) for each bad input.
#include "trainer/config/config_validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "trainer/config/config_loader.h"

namespace zerotrain::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<TrainerConfig> Validate(const std::string& pbtxt, int world = 2,
                                       std::vector<std::string>* warnings = nullptr) {
  std::vector<std::string> ignored;
  absl::StatusOr<TrainerConfigProto> proto =
      ParsePbtxt("train_micro_batch_size_per_gpu: 4\n" + pbtxt, "test.pbtxt");
  if (!proto.ok()) return proto.status();
  return ValidateConfig(*proto, world, warnings ? warnings : &ignored);
}

TrainerConfig Valid(const std::string& pbtxt, std::vector<std::string>* warnings = nullptr) {
  absl::StatusOr<TrainerConfig> c = Validate(pbtxt, 2, warnings);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : TrainerConfig{};
}

// The error message, which must name the field and the value.
std::string Error(const std::string& pbtxt,
                  absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  absl::StatusOr<TrainerConfig> c = Validate(pbtxt);
  EXPECT_FALSE(c.ok()) << pbtxt;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), code) << c.status();
  return std::string(c.status().message());
}

TEST(ConfigValidate, DeepSpeedDefaultsWhenSectionsAreAbsent) {
  TrainerConfig c = Valid("");
  EXPECT_EQ(c.engine.stage, 0);
  EXPECT_FALSE(c.engine.overlap_comm);             // DeepSpeed's default, unlike EngineOptions'
  EXPECT_TRUE(c.engine.ignore_unused_parameters);  // likewise
  EXPECT_EQ(c.engine.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.engine.precision, engine::Precision::kFloat32);
  EXPECT_EQ(c.engine.optimizer, engine::OptimizerKind::kAdam);
  EXPECT_TRUE(c.engine.adam.adamw);  // FusedAdam's adam_w_mode = True
  EXPECT_EQ(c.engine.adam.weight_decay, 0.0);
  EXPECT_EQ(c.batch.train_batch_size, 8);
  EXPECT_EQ(c.run.steps_per_print, 0);  // DeepSpeed 0.19.8's None: no progress lines
  EXPECT_EQ(c.engine.gradient_clipping, 1.0);
  EXPECT_TRUE(Valid("zero_optimization { stage: 3 }").engine.overlap_comm);  // on at stage 3
  EXPECT_EQ(c.scheduler.type, "");
  // Unset model and data fields are the modules' own defaults.
  const models::GptOptions g;
  EXPECT_EQ(c.model.n_embd, g.n_embd);
  EXPECT_EQ(c.model.n_layer, g.n_layer);
  EXPECT_EQ(c.effective.model().n_head(), g.n_head);
  EXPECT_EQ(c.data.seed, DataOptions{}.seed);
  EXPECT_EQ(c.metrics.csv_output_path, c.run.output_dir);
}

TEST(ConfigValidate, Stage3KeysMapOntoEngineOptions) {
  TrainerConfig c = Valid(R"(
    zero_optimization { stage: 3 stage3_prefetch_bucket_size: 11 stage3_max_live_parameters: 22
                        stage3_max_reuse_distance: 33 stage3_param_persistence_threshold: 44
                        stage3_model_persistence_threshold: 55 })");
  EXPECT_EQ(c.engine.stage, 3);
  EXPECT_EQ(c.engine.stage3.prefetch_numel, 11);
  EXPECT_EQ(c.engine.stage3.max_live_numel, 22);
  EXPECT_EQ(c.engine.stage3.max_reuse_distance, 33);
  EXPECT_EQ(c.engine.stage3.persistence_threshold, 44);
  EXPECT_EQ(c.engine.stage3.model_persistence_threshold, 55);
}

TEST(ConfigValidate, ZeroAndPrecisionMapOntoEngineOptions) {
  TrainerConfig c = Valid(R"(
    gradient_clipping: 0.5
    zero_optimization { stage: 2 overlap_comm: true reduce_scatter: false
                        reduce_bucket_size: 1000 allgather_bucket_size: 2000
                        ignore_unused_parameters: false }
    fp16 { enabled: true initial_scale_power: 8 loss_scale_window: 50 hysteresis: 1
           consecutive_hysteresis: true min_loss_scale: 0.5 })");
  EXPECT_EQ(c.engine.stage, 2);
  EXPECT_TRUE(c.engine.overlap_comm);
  EXPECT_FALSE(c.engine.reduce_scatter);
  EXPECT_EQ(c.engine.reduce_bucket_size, 1000);
  EXPECT_EQ(c.engine.allgather_bucket_size, 2000);
  EXPECT_FALSE(c.engine.ignore_unused_parameters);
  EXPECT_EQ(c.engine.gradient_clipping, 0.5);
  EXPECT_EQ(c.engine.precision, engine::Precision::kFloat16);
  EXPECT_EQ(c.engine.fp16.initial_scale_power, 8);
  EXPECT_EQ(c.engine.fp16.loss_scale_window, 50);
  EXPECT_EQ(c.engine.fp16.hysteresis, 1);
  EXPECT_TRUE(c.engine.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.engine.fp16.min_loss_scale, 0.5);
  EXPECT_EQ(Valid("bf16 { enabled: true }").engine.precision, engine::Precision::kBFloat16);
}

TEST(ConfigValidate, OptimizerOffloadMapsOntoEngineOptionsAtStages1To3) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    const std::string zero = absl::StrCat("zero_optimization { stage: ", stage,
                                          " sub_group_size: 1000 offload_optimizer { ");
    TrainerConfig cpu = Valid(zero + R"(device: "cpu" pin_memory: true } })");
    EXPECT_EQ(cpu.engine.offload_optimizer.device, engine::OffloadDevice::kCpu);
    EXPECT_TRUE(cpu.engine.offload_optimizer.pin_memory);
    EXPECT_EQ(cpu.engine.sub_group_size, 1000);
    std::vector<std::string> warnings;
    TrainerConfig nvme = Valid(zero + R"(device: "nvme" nvme_path: "/local_nvme" buffer_count: 2
                                         fast_init: true } }
                                         aio { block_size: 262144 queue_depth: 4
                                               intra_op_parallelism: 2 })",
                               &warnings);
    const engine::OptimizerOffloadOptions& o = nvme.engine.offload_optimizer;
    EXPECT_EQ(o.device, engine::OffloadDevice::kNvme);
    EXPECT_TRUE(o.pin_memory);              // DeepSpeed 0.19.8's default
    EXPECT_EQ(o.nvme_path, "/local_nvme");  // not checked here: the engine does at Create
    EXPECT_EQ(o.buffer_count, 2);
    EXPECT_EQ(o.aio.block_size, 262144);
    EXPECT_EQ(o.aio.queue_depth, 4);
    EXPECT_EQ(o.aio.thread_count, 2);
    EXPECT_TRUE(warnings.empty()) << warnings.front();  // fast_init has nothing to say
  }
  // Without the section: nothing offloaded, DeepSpeed's sub_group_size and aio, at any stage.
  TrainerConfig none = Valid("zero_optimization { stage: 2 }");
  EXPECT_EQ(none.engine.offload_optimizer.device, engine::OffloadDevice::kNone);
  EXPECT_EQ(none.engine.sub_group_size, 1000000000);
  EXPECT_EQ(none.engine.offload_optimizer.aio.block_size, 1048576);
  EXPECT_EQ(none.engine.offload_optimizer.aio.queue_depth, 8);
  EXPECT_EQ(Valid("zero_optimization { stage: 0 sub_group_size: 7 }").engine.sub_group_size, 7);
  // With device "none" the rest of the section is ignored, as DeepSpeed's templates carry it.
  EXPECT_EQ(Valid(R"(zero_optimization { offload_optimizer { device: "none" buffer_count: 0
                                                               ratio: 0.5 } })")
                .engine.offload_optimizer.device,
            engine::OffloadDevice::kNone);
}

TEST(ConfigValidate, OptimizerOffloadErrorsNameTheField) {
  using absl::StatusCode;
  EXPECT_THAT(Error(R"(zero_optimization { stage: 0 offload_optimizer { device: "cpu" } })"),
              HasSubstr("zero_optimization.offload_optimizer.device = \"cpu\": optimizer "
                        "offload needs zero_optimization.stage >= 1 (stage is 0)"));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 3 offload_optimizer { device: "nvme" } })"),
              HasSubstr("zero_optimization.offload_optimizer.nvme_path = \"\""));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 2
                        offload_optimizer { device: "nvme" nvme_path: "" } })"),
              HasSubstr("zero_optimization.offload_optimizer.nvme_path = \"\""));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 1
                        offload_optimizer { device: "cpu" buffer_count: 0 } })"),
              HasSubstr("zero_optimization.offload_optimizer.buffer_count = 0: must be >= 1"));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 2
                        offload_optimizer { device: "cpu" buffer_count: 4294967297 } })"),
              HasSubstr("zero_optimization.offload_optimizer.buffer_count = 4294967297"));
  EXPECT_THAT(Error("zero_optimization { stage: 2 sub_group_size: 0 }"),
              HasSubstr("zero_optimization.sub_group_size = 0: must be in [1, 2^40] elements"));
  EXPECT_THAT(
      Error(R"(zero_optimization { stage: 2 offload_optimizer { device: "cpu" ratio: 0.5 } })",
            StatusCode::kUnimplemented),
      HasSubstr("zero_optimization.offload_optimizer.ratio = 0.5: partial optimizer "
                "offload is not implemented"));
  EXPECT_THAT(Error("aio { block_size: 1000 }"),
              HasSubstr("aio.block_size = 1000: must be a multiple of 4096"));
  EXPECT_THAT(Error("aio { queue_depth: 64 intra_op_parallelism: 32 }"),
              HasSubstr("aio.queue_depth x aio.intra_op_parallelism = 64 x 32"));
  EXPECT_THAT(Error("aio { intra_op_parallelism: 4294967297 }"), HasSubstr("aio.queue_depth x "));
}

TEST(ConfigValidate, OffloadPipeliningIsAcceptedWithAWarning) {
  std::vector<std::string> warnings;
  TrainerConfig c = Valid(R"(zero_optimization { stage: 3 offload_optimizer {
                               device: "nvme" nvme_path: "/tmp" pipeline_read: true
                               pipeline_write: true } })",
                          &warnings);
  EXPECT_EQ(c.engine.offload_optimizer.device, engine::OffloadDevice::kNvme);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("zero_optimization.offload_optimizer.pipeline_read = true"));
  EXPECT_THAT(warnings[1], HasSubstr("zero_optimization.offload_optimizer.pipeline_write = true"));
  EXPECT_THAT(warnings[0], HasSubstr("always overlaps"));
}

TEST(ConfigValidate, OptimizerTypesFollowDeepSpeed) {
  TrainerConfig adam = Valid(R"(optimizer { type: "Adam" params { lr: 0.01 betas: [0.8, 0.9]
                                 eps: 1e-6 weight_decay: 0.1 adam_w_mode: false } })");
  EXPECT_EQ(adam.engine.adam.lr, 0.01);
  EXPECT_EQ(adam.engine.adam.beta1, 0.8);
  EXPECT_EQ(adam.engine.adam.beta2, 0.9);
  EXPECT_EQ(adam.engine.adam.eps, 1e-6);
  EXPECT_EQ(adam.engine.adam.weight_decay, 0.1);
  EXPECT_FALSE(adam.engine.adam.adamw);
  EXPECT_TRUE(Valid(R"(optimizer { type: "adamw" })").engine.adam.adamw);
  TrainerConfig sgd = Valid(R"(optimizer { type: "sgd" params { lr: 0.1 momentum: 0.9
                                nesterov: true weight_decay: 0.01 } })");
  EXPECT_EQ(sgd.engine.optimizer, engine::OptimizerKind::kSgd);
  // OneCycle cycles Adam's betas; SGD has none, so it cycles only the lr, with a warning (as
  // DeepSpeed does for an optimizer without betas).
  std::vector<std::string> warnings;
  TrainerConfig cycled = Valid(R"(optimizer { type: "sgd" params { lr: 0.1 } }
      scheduler { type: "OneCycle" params { cycle_min_lr: 0.01 cycle_max_lr: 0.1 } })",
                               &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("scheduler.params.cycle_momentum: SGD has no betas"));
  EXPECT_FALSE(std::get<optim::OneCycleOptions>(cycled.scheduler.options).cycle_momentum);
  EXPECT_FALSE(cycled.effective.scheduler().params().cycle_momentum());
  EXPECT_EQ(sgd.engine.sgd.lr, 0.1);
  EXPECT_EQ(sgd.engine.sgd.momentum, 0.9);
  EXPECT_TRUE(sgd.engine.sgd.nesterov);
  EXPECT_EQ(sgd.engine.sgd.weight_decay, 0.01);
  EXPECT_EQ(sgd.effective.optimizer().type(), "SGD");
  EXPECT_FALSE(sgd.effective.optimizer().params().has_eps());  // only SGD's parameters
}

// The params a type takes are those of the class DeepSpeed builds for it on the configured path.
TEST(ConfigValidate, OptimizerParamsAreThoseOfTheClassDeepSpeedBuilds) {
  const std::string offload = R"(zero_optimization { stage: 2 offload_optimizer { device: "cpu" } }
      )";
  EXPECT_EQ(Valid(R"(optimizer { type: "AdamW" params { set_grad_none: false } })")
                .engine.adam.weight_decay,
            0);
  EXPECT_THAT(
      Error(R"(optimizer { type: "AdamW" params { foreach: false } })"),
      HasSubstr("optimizer.params.foreach: not a parameter of Adam (DeepSpeed's FusedAdam)"));
  // torch.optim.AdamW: its own weight_decay default, no bias_correction.
  TrainerConfig torch_adamw = Valid(R"(optimizer { type: "Adam" params { torch_adam: true
                                        foreach: true fused: false } })");
  EXPECT_EQ(torch_adamw.engine.adam.weight_decay, 0.01);
  EXPECT_TRUE(torch_adamw.engine.adam.adamw);
  EXPECT_THAT(Error(R"(optimizer { type: "AdamW" params { torch_adam: true bias_correction: true
                       } })"),
              HasSubstr("optimizer.params.bias_correction: not a parameter of AdamW with "
                        "torch_adam (torch.optim.AdamW)"));
  TrainerConfig torch_adam = Valid(R"(optimizer { type: "Adam" params { torch_adam: true
                                       adam_w_mode: false } })");
  EXPECT_EQ(torch_adam.engine.adam.weight_decay, 0);
  EXPECT_FALSE(torch_adam.engine.adam.adamw);
  EXPECT_TRUE(Valid(R"(optimizer { type: "Adam" params { torch_adam: true adam_w_mode: false
                       decoupled_weight_decay: true } })")
                  .engine.adam.adamw);
  EXPECT_THAT(Error(R"(optimizer { type: "Adam" params { torch_adam: true maximize: true } })"),
              HasSubstr("optimizer.params.maximize = true: not supported by zerotrain"));
  EXPECT_THAT(Error(offload + R"(optimizer { type: "Adam" params { set_grad_none: true } })"),
              HasSubstr("not a parameter of Adam with offload_optimizer (DeepSpeedCPUAdam)"));
  // DeepSpeedCPUAdam's moments in the master's dtype: fp32 here, so nothing changes.
  EXPECT_FALSE(
      Valid(offload + R"(optimizer { type: "Adam" params { fp32_optimizer_states: false } })")
          .engine.bf16_optimizer_states);
  EXPECT_THAT(
      Error(offload + R"(optimizer { type: "Adagrad" params { fp32_optimizer_states: false } })"),
      HasSubstr("optimizer.params.fp32_optimizer_states = false: not supported by zerotrain"));
  Valid(R"(optimizer { type: "Adam" params { fp32_optimizer_states: false } })");  // popped
  Valid(offload + R"(optimizer { type: "Adagrad" params { fp32_optimizer_states: true } })");
  EXPECT_THAT(Error(R"(optimizer { type: "Adagrad" params { capturable: false } })"),
              HasSubstr("optimizer.params.capturable: not a parameter of Adagrad"));
  EXPECT_THAT(Error(R"(zero_allow_untested_optimizer: true optimizer { type: "Lamb"
                       params { foreach: false } })"),
              HasSubstr("optimizer.params.foreach: not a parameter of Lamb (FusedLamb)"));
  Valid(R"(optimizer { type: "SGD" params { maximize: false foreach: true differentiable: false
           } })");
}

// Adagrad is torch.optim.Adagrad, or DeepSpeedCPUAdagrad (fewer parameters) with offload; Lamb is
// FusedLamb, which DeepSpeed runs under ZeRO only with zero_allow_untested_optimizer.
TEST(ConfigValidate, AdagradAndLambFollowDeepSpeed) {
  TrainerConfig adagrad = Valid(R"(optimizer { type: "adagrad" params { lr_decay: 0.1
                                    initial_accumulator_value: 0.5 weight_decay: 0.01 } })");
  EXPECT_EQ(adagrad.engine.optimizer, engine::OptimizerKind::kAdagrad);
  EXPECT_EQ(adagrad.engine.adagrad.lr, 1e-2);  // torch's default, not the proto's 1e-3
  EXPECT_EQ(adagrad.engine.adagrad.eps, 1e-10);
  EXPECT_EQ(adagrad.engine.adagrad.lr_decay, 0.1);
  EXPECT_EQ(adagrad.engine.adagrad.weight_decay, 0.01);
  EXPECT_EQ(adagrad.engine.adagrad_initial_accumulator, 0.5);
  EXPECT_EQ(adagrad.effective.optimizer().type(), "Adagrad");
  EXPECT_EQ(adagrad.effective.optimizer().params().lr(), 1e-2);
  EXPECT_EQ(adagrad.effective.optimizer().params().betas_size(), 0);
  const std::string offload = R"(zero_optimization { stage: 2 offload_optimizer { device: "cpu" } }
      optimizer { type: "Adagrad" params { )";
  TrainerConfig cpu = Valid(offload + "lr: 0.05 amsgrad: true } }");
  EXPECT_EQ(cpu.engine.adagrad.lr, 0.05);
  EXPECT_FALSE(cpu.effective.optimizer().params().has_lr_decay());
  EXPECT_THAT(Error(offload + "lr_decay: 0.1 } }"),
              HasSubstr("optimizer.params.lr_decay: not a parameter of Adagrad with "
                        "offload_optimizer (DeepSpeedCPUAdagrad)"));
  EXPECT_THAT(Error(R"(optimizer { type: "Adagrad" params { initial_accumulator_value: -1 } })"),
              HasSubstr("optimizer.params.initial_accumulator_value = -1: must be >= 0"));
  EXPECT_THAT(Error(R"(optimizer { type: "Adagrad" params { betas: [0.9, 0.99] } })"),
              HasSubstr("optimizer.params.betas: not a parameter of Adagrad"));
  // The schedules read Adagrad's lr (WarmupLR warms up to it), and OneCycle, with no betas to
  // cycle, cycles only the lr (DeepSpeed: the optimizer's defaults have no "betas").
  TrainerConfig warm = Valid(R"(optimizer { type: "Adagrad" params { lr: 0.04 } }
      scheduler { type: "WarmupLR" params { warmup_num_steps: 5 } })");
  EXPECT_EQ(std::get<optim::WarmupLROptions>(warm.scheduler.options).warmup_max_lr, 0.04);
  std::vector<std::string> warnings;
  TrainerConfig cycled = Valid(R"(optimizer { type: "Adagrad" }
      scheduler { type: "OneCycle" params { cycle_min_lr: 0.01 cycle_max_lr: 0.1 } })",
                               &warnings);
  EXPECT_FALSE(std::get<optim::OneCycleOptions>(cycled.scheduler.options).cycle_momentum);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("Adagrad has no betas to cycle"));

  TrainerConfig lamb = Valid(R"(zero_allow_untested_optimizer: true
      zero_optimization { stage: 3 }
      optimizer { type: "LAMB" params { lr: 0.002 betas: [0.8, 0.9] eps: 1e-6
          eps_inside_sqrt: true weight_decay: 0.01 bias_correction: false max_coeff: 5
          min_coeff: 0.1 } })");
  const optim::LambOptions& l = lamb.engine.lamb;
  EXPECT_EQ(lamb.engine.optimizer, engine::OptimizerKind::kLamb);
  EXPECT_EQ(l.lr, 0.002);
  EXPECT_EQ(l.beta1, 0.8);
  EXPECT_EQ(l.beta2, 0.9);
  EXPECT_EQ(l.eps, 1e-6);
  EXPECT_TRUE(l.eps_inside_sqrt);
  EXPECT_FALSE(l.bias_correction);
  EXPECT_EQ(l.max_coeff, 5);
  EXPECT_EQ(l.min_coeff, 0.1);
  EXPECT_EQ(lamb.effective.optimizer().type(), "Lamb");
  const optim::LambOptions defaults = Valid(R"(optimizer { type: "Lamb" })").engine.lamb;
  EXPECT_EQ(defaults.lr, 1e-3);
  EXPECT_EQ(defaults.max_coeff, 10.0);
  EXPECT_EQ(defaults.min_coeff, 0.01);
  EXPECT_TRUE(defaults.bias_correction);
  EXPECT_THAT(Error(R"(zero_optimization { stage: 1 } optimizer { type: "Lamb" })"),
              HasSubstr("zero_allow_untested_optimizer: true"));
  EXPECT_THAT(Error(R"(optimizer { type: "Lamb" params { amsgrad: true } })"),
              HasSubstr("optimizer.params.amsgrad = true: FusedLamb does not support"));
  EXPECT_THAT(Error(R"(optimizer { type: "Lamb" params { min_coeff: 20 } })"),
              HasSubstr("optimizer.params.min_coeff = 20, max_coeff = 10"));
  EXPECT_THAT(Error(R"(optimizer { type: "Lamb" params { momentum: 0.9 } })"),
              HasSubstr("optimizer.params.momentum: not a parameter of Lamb (FusedLamb)"));
  EXPECT_THAT(Error(R"(optimizer { type: "Lamb" params { max_grad_norm: 1 } })"),
              HasSubstr("optimizer.params.max_grad_norm: DeepSpeed refuses it"));
}

// Muon is DeepSpeed's MuonWithAuxAdam: its defaults when keys are left out, lr shared by both
// halves unless muon_lr/adam_lr say otherwise, and what DeepSpeed refuses or ignores.
TEST(ConfigValidate, Muon) {
  const TrainerConfig defaults =
      Valid(R"(zero_optimization { stage: 2 } optimizer { type: "muon" })");
  const engine::MuonOptions& d = defaults.engine.muon;
  EXPECT_EQ(defaults.engine.optimizer, engine::OptimizerKind::kMuon);
  EXPECT_EQ(defaults.effective.optimizer().type(), "Muon");
  EXPECT_EQ(d.lr, 0.02);
  EXPECT_EQ(d.adam.lr, 3e-4);
  EXPECT_EQ(d.momentum, 0.95);
  EXPECT_EQ(d.weight_decay, 0.0);
  EXPECT_EQ(d.ns_method, optim::NsMethod::kGram);
  EXPECT_EQ(d.adam.beta1, 0.9);
  EXPECT_EQ(d.adam.beta2, 0.95);
  EXPECT_EQ(d.adam.eps, 1e-10);
  EXPECT_TRUE(d.adam.adamw);
  EXPECT_FALSE(d.orthogonalize_clipped);  // stage 2 by default: ZeRO's order
  EXPECT_TRUE(d.use_muon("h.0.attn.weight", {4, 4}));
  EXPECT_FALSE(d.use_muon("model.embed_tokens.weight", {4, 4}));
  EXPECT_FALSE(d.use_muon("lm_head.weight", {4, 4}));
  EXPECT_FALSE(d.use_muon("h.0.ln.weight", {4}));

  const TrainerConfig shared = Valid(R"(zero_optimization { stage: 0 }
      optimizer { type: "Muon" params { lr: 0.01 momentum: 0.9 weight_decay: 0.1
          ns_method: "standard" betas: [0.8, 0.99] eps: 1e-8 } })");
  const engine::MuonOptions& m = shared.engine.muon;
  EXPECT_EQ(m.lr, 0.01);
  EXPECT_EQ(m.adam.lr, 0.01);
  EXPECT_EQ(m.momentum, 0.9);
  EXPECT_EQ(m.weight_decay, 0.1);
  EXPECT_EQ(m.adam.weight_decay, 0.1);
  EXPECT_EQ(m.ns_method, optim::NsMethod::kStandard);
  EXPECT_EQ(m.adam.beta1, 0.8);
  EXPECT_EQ(m.adam.eps, 1e-8);
  EXPECT_TRUE(m.orthogonalize_clipped);  // DeepSpeed's stage 0 clips the raw gradients
  const TrainerConfig split =
      Valid(R"(optimizer { type: "Muon" params { lr: 0.01 muon_lr: 0.03 adam_lr: 0.001 } })");
  EXPECT_EQ(split.engine.muon.lr, 0.03);
  EXPECT_EQ(split.engine.muon.adam.lr, 0.001);
  EXPECT_EQ(split.effective.optimizer().params().adam_lr(), 0.001);

  // The config's override of DeepSpeed's rule: Adam's patterns first, then Muon's.
  const engine::UseMuonFn pick = Valid(R"(optimizer { type: "Muon" }
      model { adam_params: "h\\.0\\..*" adam_params: ".*\\.proj\\.weight"
              muon_params: "wte\\.weight" muon_params: "h\\.0\\.attn\\.c_attn\\.weight" })")
                                     .engine.muon.use_muon;
  EXPECT_FALSE(pick("h.0.attn.c_attn.weight", {4, 4}));  // Adam's pattern wins
  EXPECT_FALSE(pick("h.1.mlp.proj.weight", {4, 4}));
  EXPECT_TRUE(pick("h.1.mlp.fc.weight", {4, 4}));  // DeepSpeed's rule
  EXPECT_TRUE(pick("wte.weight", {4, 4}));
  EXPECT_FALSE(pick("model.embed_tokens.weight", {4, 4}));
  EXPECT_THAT(Error(R"(optimizer { type: "Muon" } model { adam_params: "(" })"),
              HasSubstr("model.adam_params[0] = \"(\": not a regular expression"));
  EXPECT_THAT(Error(R"(model { muon_params: "wte.weight" })"),
              HasSubstr("model.muon_params: only for optimizer.type \"Muon\""));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 3 } optimizer { type: "Muon" })"),
              HasSubstr("needs zero_optimization.reduce_scatter: false (DeepSpeed: \"Muon and "
                        "reduce scatter cannot be used together\")"));
  EXPECT_EQ(Valid(R"(zero_optimization { stage: 3 reduce_scatter: false }
      optimizer { type: "Muon" })")
                .engine.optimizer,
            engine::OptimizerKind::kMuon);
  EXPECT_THAT(Error(R"(optimizer { type: "Muon" params { ns_method: "polar" } })"),
              HasSubstr("optimizer.params.ns_method \"polar\": expected \"gram\" or"));
  EXPECT_THAT(Error(R"(optimizer { type: "Muon" params { nesterov: false } })"),
              HasSubstr("always uses Nesterov momentum"));
  EXPECT_THAT(Error(R"(optimizer { type: "Muon" params { amsgrad: true } })"),
              HasSubstr("optimizer.params.amsgrad: not a parameter of Muon (MuonWithAuxAdam)"));
  EXPECT_THAT(Error(R"(optimizer { type: "Muon" params { momentum: 1 } })"),
              HasSubstr("optimizer.params.momentum = 1: must be in [0, 1)"));
  // The state on NVMe; Muon keeps the gradient shard in memory (engine/engine.cc).
  EXPECT_EQ(Valid(R"(zero_optimization { stage: 3 reduce_scatter: false offload_optimizer {
                       device: "nvme" nvme_path: "/tmp" } } optimizer { type: "Muon" })")
                .engine.offload_optimizer.device,
            engine::OffloadDevice::kNvme);
}

TEST(ConfigValidate, ActivationCheckpointing) {
  std::vector<std::string> warnings;
  TrainerConfig c = Valid(R"(model { n_layer: 5 }
      activation_checkpointing { number_checkpoints: 2 cpu_checkpointing: true profile: true
                                 partition_activations: true })",
                          &warnings);
  EXPECT_EQ(c.model.checkpoint_every, 3);  // ceil(5 / 2)
  EXPECT_TRUE(c.model.cpu_checkpointing);
  EXPECT_TRUE(c.model.profile_checkpointing);
  EXPECT_TRUE(c.activation_checkpointing.cpu_checkpointing);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("partition_activations"));
  EXPECT_THAT(warnings[0], HasSubstr("model parallelism"));
  EXPECT_EQ(
      Valid("model { checkpoint_every: 1 } activation_checkpointing { number_checkpoints: 2 }")
          .model.checkpoint_every,
      1);
}

TEST(ConfigValidate, MonitorsCommsAndRun) {
  TrainerConfig c = Valid(R"(
    steps_per_print: 3 wall_clock_breakdown: true
    tensorboard { enabled: true job_name: "j" }
    csv_monitor { enabled: true output_path: "/tmp/csv" job_name: "j" }
    comms_logger { enabled: true prof_all: false prof_ops: ["all_gather_into_tensor"] }
    run { steps: 7 output_dir: "/tmp/out" eval_interval: 2 eval_iters: 3 sample_tokens: 0
          check_calls: false dist_backend: "shm" })");
  EXPECT_TRUE(c.metrics.tensorboard);
  EXPECT_EQ(c.metrics.tensorboard_output_path, "/tmp/out");
  EXPECT_EQ(c.metrics.csv_output_path, "/tmp/csv");
  EXPECT_EQ(c.metrics.job_name, "j");
  EXPECT_TRUE(c.comms_logger.enabled);
  EXPECT_THAT(c.comms_logger.prof_ops, ElementsAre("all_gather"));
  EXPECT_EQ(c.run.steps, 7);
  EXPECT_EQ(c.run.steps_per_print, 3);
  EXPECT_TRUE(c.run.wall_clock_breakdown);
  EXPECT_EQ(c.run.eval_interval, 2);
  EXPECT_FALSE(c.run.check_calls);
  EXPECT_TRUE(Valid("").run.check_calls);  // on unless turned off
  EXPECT_EQ(c.run.dist_backend, comm::BackendKind::kShm);
  // Unset, both are "auto": each rank resolves them against its GPUs (device_placement.h).
  EXPECT_EQ(Valid("").run.dist_backend, std::nullopt);
  EXPECT_EQ(Valid("").run.device, DeviceRequest::kAuto);
  EXPECT_EQ(Valid("").engine.keep_last_checkpoints, 0);  // keep all
  EXPECT_EQ(Valid("run { keep_last_checkpoints: 3 }").engine.keep_last_checkpoints, 3);
}

TEST(ConfigValidate, CommTimeoutIsSecondsUpToADay) {
  EXPECT_EQ(Valid("").run.comm_timeout_s, 300);
  EXPECT_EQ(Valid("run { comm_timeout_s: 1 }").run.comm_timeout_s, 1);
  EXPECT_EQ(Valid("run { comm_timeout_s: 86400 }").run.comm_timeout_s, 86400);
  EXPECT_THAT(Error("run { comm_timeout_s: 0 }"),
              HasSubstr("run.comm_timeout_s = 0: must be in [1, 86400] seconds"));
  EXPECT_THAT(Error("run { comm_timeout_s: 86401 }"),
              HasSubstr("run.comm_timeout_s = 86401: must be in [1, 86400] seconds"));
}

TEST(ConfigValidate, DeviceAndBackendSpellings) {
  const std::pair<const char*, DeviceRequest> devices[] = {
      {"auto", DeviceRequest::kAuto}, {"cuda", DeviceRequest::kCuda}, {"CPU", DeviceRequest::kCpu}};
  for (const auto& [text, want] : devices) {
    EXPECT_EQ(Valid(absl::StrCat("run { device: \"", text, "\" }")).run.device, want) << text;
  }
  const std::pair<const char*, DistBackend> backends[] = {{"auto", std::nullopt},
                                                          {"nccl", comm::BackendKind::kNccl},
                                                          {"gloo", comm::BackendKind::kGloo},
                                                          {"Shm", comm::BackendKind::kShm}};
  for (const auto& [text, want] : backends) {
    EXPECT_EQ(Valid(absl::StrCat("run { dist_backend: \"", text, "\" }")).run.dist_backend, want)
        << text;
  }
  EXPECT_EQ(Valid(R"(run { device: "cuda" dist_backend: "gloo" })").run.dist_backend,
            comm::BackendKind::kGloo);  // Gloo serves CUDA ranks through host memory
  EXPECT_THAT(Error(R"(run { device: "cuda:1" })"),
              HasSubstr("run.device = \"cuda:1\": expected auto, cuda or cpu"));
  EXPECT_THAT(Error(R"(run { device: "cpu" dist_backend: "nccl" })"),
              HasSubstr("run.dist_backend = \"nccl\": NCCL moves CUDA tensors only, and "
                        "run.device is \"cpu\""));
}

TEST(ConfigValidate, BadValuesNameFieldAndValue) {
  EXPECT_THAT(Error(R"(model { name: "bert" })"),
              HasSubstr("model.name = \"bert\": unknown model (known: gpt, gpt2, llama, "
                        "resnet18, resnet50)"));
  EXPECT_THAT(Error(R"(model { name: "resnet18" })"),
              HasSubstr("model.name \"resnet18\" trains on data.source \"images\""));
  EXPECT_THAT(Error(R"(model { name: "gpt" num_classes: 10 })"),
              HasSubstr("model.num_classes = 10: applies to the image classifiers"));
  EXPECT_THAT(Error(R"(model { name: "resnet50" n_layer: 3 })"),
              HasSubstr("model.n_layer = (set): does not apply to model.name \"resnet50\""));
  EXPECT_THAT(Error(R"(model { name: "llama" dropout: 0.1 })"),
              HasSubstr("model.dropout does not apply to model.name \"llama\""));
  EXPECT_THAT(Error(R"(model { name: "gpt" n_kv_head: 2 })"),
              HasSubstr("model.n_kv_head does not apply to model.name \"gpt\""));
  EXPECT_THAT(Error(R"(model { name: "llama" n_head: 6 n_kv_head: 4 })"), HasSubstr("n_kv_head"));
  EXPECT_THAT(
      Error(R"(run { dist_backend: "mpi" })"),
      HasSubstr("run.dist_backend = \"mpi\": unknown backend (known: auto, nccl, gloo, shm)"));
  EXPECT_THAT(Error(R"(optimizer { type: "Adamax" })"), HasSubstr("optimizer.type = \"Adamax\""));
  EXPECT_THAT(Error("optimizer { params { lr: -0.001 } }"),
              HasSubstr("optimizer.params.lr = -0.001: must be >= 0"));
  EXPECT_THAT(Error("optimizer { params { betas: [0.9] } }"), HasSubstr("optimizer.params.betas"));
  EXPECT_THAT(Error(R"(optimizer { type: "Adam" params { momentum: 0.9 } })"),
              HasSubstr("optimizer.params.momentum: not a parameter of Adam"));
  EXPECT_THAT(Error(R"(optimizer { type: "SGD" params { nesterov: true } })"),
              HasSubstr("optimizer.params.nesterov"));
  EXPECT_THAT(Error("zero_optimization { stage: 5 }"), HasSubstr("zero_optimization.stage = 5"));
  EXPECT_THAT(Error("zero_optimization { reduce_bucket_size: 0 }"),
              HasSubstr("zero_optimization.reduce_bucket_size = 0"));
  EXPECT_THAT(Error("fp16 { enabled: true } bf16 { enabled: true }"),
              HasSubstr("fp16.enabled and bf16.enabled"));
  EXPECT_THAT(Error("gradient_clipping: -1"), HasSubstr("gradient_clipping = -1"));
  EXPECT_THAT(Error(R"(scheduler { type: "Cosine" })"), HasSubstr("scheduler.type = \"Cosine\""));
  EXPECT_THAT(Error(R"(scheduler { type: "WarmupLR" params { total_num_steps: 5 } })"),
              HasSubstr("scheduler.params.total_num_steps: not a parameter of WarmupLR"));
  EXPECT_THAT(Error(R"(data { source: "text" path: "/nonexistent/corpus.txt" })"),
              HasSubstr("data.path = \"/nonexistent/corpus.txt\": cannot read"));
  EXPECT_THAT(Error(R"(data { source: "web" })"), HasSubstr("data.source = \"web\""));
  EXPECT_THAT(Error("data { eval_fraction: 1.5 }"), HasSubstr("data.eval_fraction = 1.5"));
  EXPECT_THAT(Error("run { steps: 0 }"), HasSubstr("run.steps = 0"));
  EXPECT_THAT(Error("model { n_embd: 384 n_head: 5 }"), HasSubstr("model: "));  // 384 % 5
  EXPECT_THAT(Error("activation_checkpointing { number_checkpoints: 0 }"),
              HasSubstr("activation_checkpointing.number_checkpoints = 0"));
  EXPECT_THAT(Error(R"(comms_logger { prof_ops: ["send"] })"),
              HasSubstr("comms_logger.prof_ops[0] = \"send\""));
  EXPECT_THAT(Error("aio { queue_depth: 0 }"), HasSubstr("aio.queue_depth = 0"));
  EXPECT_THAT(Error(R"(checkpoint { tag_validation: "Maybe" })"),
              HasSubstr("checkpoint.tag_validation = \"Maybe\""));
}

TEST(ConfigValidate, BatchTripleThatDoesNotMultiplyOutForTheWorld) {
  absl::StatusOr<TrainerConfig> c =
      Validate("train_batch_size: 16 gradient_accumulation_steps: 1", 2);
  ASSERT_FALSE(c.ok());  // 4 per rank x 1 x 2 ranks = 8, not 16
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("train_batch_size=16"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("world_size=2"));
  EXPECT_TRUE(Validate("train_batch_size: 16 gradient_accumulation_steps: 1", 4).ok());
}

// 0 (or less) in any field of the triple is refused by name, not read as "derive it".
TEST(ConfigValidate, BatchFieldsBelowOneAreRefusedByName) {
  EXPECT_THAT(Error("gradient_accumulation_steps: 0"),
              HasSubstr("gradient_accumulation_steps = 0: must be at least 1"));
  EXPECT_THAT(Error("train_batch_size: -8"),
              HasSubstr("train_batch_size = -8: must be at least 1"));
  absl::StatusOr<TrainerConfigProto> micro =
      ParsePbtxt("train_micro_batch_size_per_gpu: 0", "test.pbtxt");
  ASSERT_TRUE(micro.ok()) << micro.status();
  std::vector<std::string> warnings;
  absl::StatusOr<TrainerConfig> c = ValidateConfig(*micro, 2, &warnings);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("train_micro_batch_size_per_gpu = 0: must be at least 1"));
  EXPECT_EQ(Valid("gradient_accumulation_steps: 2").batch.gradient_accumulation_steps, 2);
  // The same from a ds_config.json.
  const std::string json = std::string(std::getenv("TEST_TMPDIR")) + "/gas0.json";
  std::ofstream(json)
      << R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 0})";
  absl::StatusOr<TrainerConfigProto> from_json = LoadConfigProto({"", json}, &warnings);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  c = ValidateConfig(*from_json, 2, &warnings);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("gradient_accumulation_steps = 0: must be at least 1"));
}

TEST(ConfigValidate, ParameterOffloadMapsOntoEngineOptionsAtStage3) {
  TrainerConfig c = Valid(R"(zero_optimization { stage: 3 offload_param {
      device: "nvme" nvme_path: "/nvme" max_in_cpu: 1000 pin_memory: true } }
      aio { block_size: 8192 queue_depth: 4 intra_op_parallelism: 2 })");
  EXPECT_EQ(c.engine.offload_param.device, engine::OffloadDevice::kNvme);
  EXPECT_EQ(c.engine.offload_param.nvme_path, "/nvme");
  EXPECT_EQ(c.engine.offload_param.max_in_cpu, 1000);
  EXPECT_TRUE(c.engine.offload_param.pin_memory);
  EXPECT_EQ(c.engine.offload_param.aio.block_size, 8192);
  EXPECT_EQ(c.engine.offload_param.aio.thread_count, 2);
  EXPECT_EQ(Valid(R"(zero_optimization { stage: 3 offload_param { device: "cpu" } })")
                .engine.offload_param.device,
            engine::OffloadDevice::kCpu);
  EXPECT_EQ(Valid("zero_optimization { stage: 3 }").engine.offload_param.device,
            engine::OffloadDevice::kNone);
}

TEST(ConfigValidate, UnimplementedFeaturesSayWhichIssue) {
  using absl::StatusCode;
  EXPECT_THAT(Error("zero_optimization { stage: 3 stage3_max_live_parameters: -1 }"),
              HasSubstr("zero_optimization.stage3_max_live_parameters = -1: must be >= 0"));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 2 offload_param { device: "cpu" } })"),
              HasSubstr("zero_optimization.offload_param.device = \"cpu\": parameter offload "
                        "needs zero_optimization.stage 3 (stage is 2)"));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 3 offload_param { device: "nvme" } })"),
              HasSubstr("zero_optimization.offload_param.nvme_path = \"\""));
  EXPECT_THAT(
      Error(R"(zero_optimization { stage: 3 offload_param { device: "cpu" max_in_cpu: -1 } })"),
      HasSubstr("zero_optimization.offload_param.max_in_cpu = -1"));
  EXPECT_THAT(Error(R"(zero_optimization { offload_optimizer { device: "gpu" } })"),
              HasSubstr("zero_optimization.offload_optimizer.device = \"gpu\": expected none, "
                        "cpu or nvme"));
  EXPECT_THAT(Error(R"(zero_optimization { offload_param { device: "gpu" } })"),
              HasSubstr("expected none, cpu or nvme"));
  EXPECT_THAT(Error(R"(optimizer { type: "OneBitLamb" })", StatusCode::kUnimplemented),
              HasSubstr("optimizer.type = \"OneBitLamb\""));
  EXPECT_THAT(Error("checkpoint { load_universal: true }", StatusCode::kUnimplemented),
              HasSubstr("checkpoint.load_universal = true"));
  EXPECT_THAT(Error("run { save_interval: -1 }"), HasSubstr("run.save_interval = -1"));
  EXPECT_THAT(Error("run { keep_last_checkpoints: -2 }"),
              HasSubstr("run.keep_last_checkpoints = -2: must be >= 0"));
  EXPECT_THAT(Error("zero_optimization { reduce_bucket_size: 9223372036854775807 }"),
              HasSubstr("zero_optimization.reduce_bucket_size = 9223372036854775807"));
  // number_checkpoints divides by n_layer: a zero n_layer must be an error, not a crash.
  EXPECT_THAT(Error("model { n_layer: 0 } activation_checkpointing { number_checkpoints: 1 }"),
              HasSubstr("n_layer"));
  EXPECT_THAT(Error("prescale_gradients: true", StatusCode::kUnimplemented),
              HasSubstr("prescale_gradients = true"));
  EXPECT_THAT(Error("zero_optimization { stage: 3 zero_hpz_partition_size: 3 }"),
              HasSubstr("zero_optimization.zero_hpz_partition_size = 3: must divide the world "
                        "size (2 ranks)"));
  EXPECT_THAT(Error("zero_optimization { zero_hpz_partition_size: -1 }"),
              HasSubstr("zero_optimization.zero_hpz_partition_size = -1: must be at least 0"));
  EXPECT_THAT(Error("fp16 { fp16_master_weights_and_grads: true }", StatusCode::kUnimplemented),
              HasSubstr("fp16.fp16_master_weights_and_grads"));
  // Stage-3-only keys are ignored below stage 3, as DeepSpeed does.
  EXPECT_TRUE(Validate("zero_optimization { stage: 2 stage3_max_live_parameters: 10 }").ok());
}

// ZeRO++'s keys: the quantized weight gather at stage 3; below stage 3 DeepSpeed reads none of
// them, and zerotrain says so.
TEST(ConfigValidateTest, ZeroPlusPlusKeys) {
  EXPECT_TRUE(Valid("zero_optimization { stage: 3 zero_quantized_weights: true }")
                  .engine.stage3.quantize_weights);
  EXPECT_FALSE(Valid("zero_optimization { stage: 3 }").engine.stage3.quantize_weights);
  EXPECT_TRUE(Valid("zero_optimization { stage: 3 zero_quantized_gradients: true }")
                  .engine.quantize_gradients);
  EXPECT_EQ(Valid("zero_optimization { stage: 3 zero_hpz_partition_size: 2 }")
                .engine.stage3.hpz_partition_size,
            2);
  EXPECT_EQ(Valid("zero_optimization { stage: 3 zero_hpz_partition_size: 0 }")
                .engine.stage3.hpz_partition_size,
            1);
  std::vector<std::string> warnings;
  const TrainerConfig c = Valid(
      "zero_optimization { stage: 2 zero_quantized_weights: true zero_quantized_gradients: true "
      "zero_hpz_partition_size: 4 }",
      &warnings);
  EXPECT_FALSE(c.engine.stage3.quantize_weights);
  EXPECT_FALSE(c.engine.quantize_gradients);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_THAT(warnings[0], HasSubstr("zero_optimization.zero_quantized_weights: ignored below "
                                     "stage 3"));
  EXPECT_THAT(warnings[2], HasSubstr("zero_optimization.zero_hpz_partition_size"));
}

// DeepSpeed 0.19.8's bf16 master weights and optimizer states: its checks, in its words, and
// DeepSpeedCPUAdam's fp32_optimizer_states false keeping the moments in the bf16 master's dtype.
TEST(ConfigValidate, Bf16MasterWeightsAndOptimizerStates) {
  const std::string offload = R"(zero_optimization { stage: 2 offload_optimizer { device: "cpu" } }
      optimizer { type: "AdamW" })";
  const std::string master = R"(bf16 { enabled: true bf16_master_weights_and_grads: true })";
  const TrainerConfig alone = Valid(offload + master);
  EXPECT_TRUE(alone.engine.bf16_master_weights);
  EXPECT_FALSE(alone.engine.bf16_optimizer_states);
  const TrainerConfig moments =
      Valid(R"(zero_optimization { stage: 3 offload_optimizer { device: "nvme" nvme_path: "/tmp" } }
          optimizer { type: "Adam" params { fp32_optimizer_states: false } })" +
            master);
  EXPECT_TRUE(moments.engine.bf16_optimizer_states);
  const TrainerConfig both = Valid(R"(zero_optimization { stage: 1 }
      optimizer { type: "SGD" params { lr: 0.1 } }
      bf16 { enabled: true bf16_master_weights_and_grads: true bf16_optimizer_states: true })");
  EXPECT_TRUE(both.engine.bf16_master_weights);
  EXPECT_TRUE(both.engine.bf16_optimizer_states);
  EXPECT_FALSE(Valid(offload).engine.bf16_master_weights);

  EXPECT_THAT(Error(R"(zero_optimization { stage: 0 } optimizer { type: "AdamW" })" + master),
              HasSubstr("Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or "
                        "3 (zero_optimization.stage is 0)"));
  EXPECT_THAT(Error(offload + R"(bf16 { enabled: true bf16_optimizer_states: true })"),
              HasSubstr("bf16.bf16_optimizer_states = true: bf16_optimizer_states requires "
                        "bf16_master_weights_and_grads to be enabled"));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 2 } optimizer { type: "AdamW" })" + master),
              HasSubstr("Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam "
                        "(offload_optimizer.device \"none\", optimizer \"AdamW\"; without "
                        "bf16_optimizer_states)"));
  EXPECT_THAT(Error(R"(zero_optimization { stage: 2 offload_optimizer { device: "cpu" } }
                       optimizer { type: "AdamW" params { torch_adam: true } })" +
                    master),
              HasSubstr("with torch_adam"));
  EXPECT_THAT(Error(offload + R"(bf16 { enabled: false bf16_master_weights_and_grads: true })"),
              HasSubstr("needs bf16.enabled true"));
}

}  // namespace
}  // namespace zerotrain::trainer
