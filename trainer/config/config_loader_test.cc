// LoadConfigProto and PrintConfig: the built-in default, pbtxt round trips, every file in
// trainer/configs/, both sources together ("auto" filled from the pbtxt, conflicts), "auto" alone
// (Hugging Face's Trainer defaults), and the errors for missing and malformed files.
#include "trainer/config/config_loader.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kConfigs[] = "trainer/configs/";
constexpr char kTestdata[] = "trainer/config/testdata/";

TrainerConfigProto Load(const ConfigSources& sources, std::vector<std::string>* warnings) {
  absl::StatusOr<TrainerConfigProto> c = LoadConfigProto(sources, warnings);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : TrainerConfigProto();
}

// The error message (a std::string, so gMock prints it as text).
std::string LoadError(const ConfigSources& sources) {
  std::vector<std::string> warnings;
  absl::StatusOr<TrainerConfigProto> c = LoadConfigProto(sources, &warnings);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : std::string(c.status().message());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ConfigLoader, NoFlagsGivesTheDefaultFileCompiledIn) {
  std::vector<std::string> warnings;
  TrainerConfigProto builtin = Load({}, &warnings);
  TrainerConfigProto file = Load({std::string(kConfigs) + "default.pbtxt", ""}, &warnings);
  EXPECT_TRUE(MessageDifferencer::Equals(builtin, file));
  EXPECT_EQ(DefaultConfigPbtxt(),
            ReadFile(std::string(kConfigs) + "default.pbtxt").insert(0, "\n"));
  EXPECT_EQ(builtin.zero_optimization().stage(), 2);
  EXPECT_FALSE(builtin.bf16().enabled());  // fp32: see the comment in default.pbtxt
  EXPECT_TRUE(warnings.empty());
}

// python/ passes a dict's JSON as text: the same config as the file, errors under the given name.
TEST(ConfigLoader, JsonTextLoadsAsItsFileWouldAndErrorsNameTheLabel) {
  std::vector<std::string> warnings;
  const std::string path = std::string(kTestdata) + "ds_full.json";
  TrainerConfigProto file = Load({"", path}, &warnings);
  ConfigSources text;
  text.ds_json_path = "<config dict>";
  text.ds_json_text = ReadFile(path);
  EXPECT_TRUE(MessageDifferencer::Equals(Load(text, &warnings), file));
  text.ds_json_text = "{\"train_batch_size\": 8,\n \"zero_optimization\": {\"stage\": \"two\"}}";
  EXPECT_THAT(LoadError(text), HasSubstr("<config dict>"));
}

TEST(ConfigLoader, PrintConfigRoundTripsAndFillsDefaults) {
  std::vector<std::string> warnings;
  TrainerConfigProto c =
      Load({std::string(kConfigs) + "activation_checkpointing.pbtxt", ""}, &warnings);
  const std::string text = PrintConfig(c);
  absl::StatusOr<TrainerConfigProto> back = ParsePbtxt(text, "printed");
  ASSERT_TRUE(back.ok()) << back.status();
  TrainerConfigProto filled = c;
  FillDefaults(&filled);
  EXPECT_TRUE(MessageDifferencer::Equals(*back, filled));
  // Defaults the file does not mention are now explicit.
  EXPECT_TRUE(back->zero_optimization().has_allgather_partitions());
  EXPECT_EQ(back->fp16().initial_scale_power(), 16);
  EXPECT_EQ(back->checkpoint().tag_validation(), "Warn");
  EXPECT_FALSE(back->model().has_n_embd());  // no declared default: ValidateConfig fills it
  EXPECT_EQ(PrintConfig(*back), text);
}

TEST(ConfigLoader, EffectiveConfigRoundTripsThroughValidation) {
  std::vector<std::string> warnings;
  absl::StatusOr<TrainerConfig> first = ValidateConfig(Load({}, &warnings), 2, &warnings);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<TrainerConfigProto> back = ParsePbtxt(PrintConfig(first->effective), "printed");
  ASSERT_TRUE(back.ok()) << back.status();
  absl::StatusOr<TrainerConfig> second = ValidateConfig(*back, 2, &warnings);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(MessageDifferencer::Equals(first->effective, second->effective))
      << PrintConfig(first->effective) << "\nvs\n"
      << PrintConfig(second->effective);
  EXPECT_EQ(back->train_batch_size(), 16);  // 8 per rank x 1 x 2 ranks
  EXPECT_EQ(back->scheduler().params().total_num_steps(), back->run().steps());
}

TEST(ConfigLoader, EveryShippedConfigLoadsAndValidatesForTwoRanks) {
  for (const char* name :
       {"default.pbtxt", "activation_checkpointing.pbtxt", "stage0.json", "stage1.json",
        "stage2.json", "fp16.json", "offload.json", "offload_nvme.json"}) {
    SCOPED_TRACE(name);
    const std::string path = std::string(kConfigs) + name;
    const bool json = absl::string_view(name).find(".json") != absl::string_view::npos;
    std::vector<std::string> warnings;
    TrainerConfigProto c =
        Load(json ? ConfigSources{"", path} : ConfigSources{path, ""}, &warnings);
    absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
    EXPECT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(warnings.empty()) << warnings.front();
  }
}

TEST(ConfigLoader, OptimizerOffloadConfigsReachTheEngine) {
  // The shipped example, and DeepSpeed's deprecated spelling of the same (cpu_offload: true).
  for (const std::string& path :
       {std::string(kConfigs) + "offload.json", std::string(kTestdata) + "ds_cpu_offload.json"}) {
    SCOPED_TRACE(path);
    std::vector<std::string> warnings;
    TrainerConfigProto c = Load({"", path}, &warnings);
    warnings.clear();  // the deprecation warning is ds_json_test's
    absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->engine.stage, 2);
    EXPECT_EQ(v->engine.offload_optimizer.device, engine::OffloadDevice::kCpu);
    EXPECT_TRUE(v->engine.offload_optimizer.pin_memory);
    EXPECT_TRUE(warnings.empty()) << warnings.front();
  }
}

// DeepSpeed's ZeRO-Infinity shape (stage 3, optimizer and parameters offloaded) loads and reaches
// the engine options; at stage 2 the same parameter offload is one clear error naming the field.
TEST(ConfigLoader, ParameterOffloadReachesTheEngineAtStage3Only) {
  std::vector<std::string> warnings;
  TrainerConfigProto c = Load({"", std::string(kTestdata) + "ds_offload_param.json"}, &warnings);
  absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->engine.offload_param.device, engine::OffloadDevice::kCpu);
  EXPECT_EQ(v->engine.offload_optimizer.device, engine::OffloadDevice::kCpu);
  c.mutable_zero_optimization()->set_stage(2);
  v = ValidateConfig(c, 2, &warnings);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("zero_optimization.offload_param.device = \"cpu\": parameter offload "
                        "needs zero_optimization.stage 3"));
}

TEST(ConfigLoader, JsonAndPbtxtTogether) {
  std::vector<std::string> warnings;
  TrainerConfigProto c =
      Load({std::string(kTestdata) + "run_sections.pbtxt", std::string(kConfigs) + "stage2.json"},
           &warnings);
  EXPECT_EQ(c.model().n_embd(), 256);                                // from the pbtxt
  EXPECT_EQ(c.zero_optimization().stage(), 2);                       // from the JSON
  EXPECT_EQ(c.zero_optimization().reduce_bucket_size(), 256 * 256);  // "auto": n_embd^2
  EXPECT_EQ(c.scheduler().params().total_num_steps(), 30);           // "auto": run.steps
  EXPECT_FALSE(c.has_train_batch_size());                            // "auto": derived
  absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->batch.train_batch_size, 8 * 2 * 2);
}

TEST(ConfigLoader, AutoTakesThePbtxtValueOrFollowsTheModel) {
  std::vector<std::string> warnings;
  TrainerConfigProto c =
      Load({std::string(kTestdata) + "hf_values.pbtxt", std::string(kTestdata) + "ds_hf_auto.json"},
           &warnings);
  EXPECT_EQ(c.optimizer().params().lr(), 2e-4);
  EXPECT_EQ(c.optimizer().params().betas_size(), 2);
  EXPECT_EQ(c.gradient_clipping(), 1.0);
  EXPECT_EQ(c.zero_optimization().reduce_bucket_size(), 128 * 128);
  EXPECT_EQ(c.scheduler().params().warmup_min_lr(), 0);
  EXPECT_EQ(c.scheduler().params().warmup_max_lr(), 2e-4);
  EXPECT_EQ(c.scheduler().params().warmup_num_steps(), 5);
  EXPECT_EQ(c.scheduler().params().total_num_steps(), 40);
  absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->batch.train_batch_size, 4 * 2 * 2);
}

TEST(ConfigLoader, JsonPlacementKeysAndTheirAuto) {
  std::vector<std::string> warnings;
  TrainerConfigProto c = Load({"", std::string(kTestdata) + "ds_placement.json"}, &warnings);
  EXPECT_EQ(c.run().dist_backend(), "nccl");
  EXPECT_FALSE(c.run().has_device());  // "auto" is the unset default, resolved per rank
  EXPECT_TRUE(warnings.empty());
  absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->run.device, DeviceRequest::kAuto);
  EXPECT_EQ(v->run.dist_backend, comm::BackendKind::kNccl);
  EXPECT_THAT(PrintConfig(v->effective), HasSubstr("device: \"auto\""));
}

// Without a pbtxt, "auto" is what Hugging Face's Trainer writes there with its TrainingArguments
// at their defaults (learning_rate 5e-5, adam_beta1/2 0.9/0.999, adam_epsilon 1e-8, weight_decay
// 0, max_grad_norm 1, warmup_steps 0); a value the JSON gives (bf16) stays.
TEST(ConfigLoader, AutoWithoutAPbtxtTakesTheTrainersDefaults) {
  std::vector<std::string> warnings;
  TrainerConfigProto c = Load({"", std::string(kTestdata) + "ds_hf_auto.json"}, &warnings);
  const OptimizerParams& p = c.optimizer().params();
  EXPECT_EQ(p.lr(), 5e-5);
  EXPECT_EQ(std::vector<double>(p.betas().begin(), p.betas().end()),
            (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(p.eps(), 1e-8);
  ASSERT_TRUE(p.has_weight_decay());
  EXPECT_EQ(p.weight_decay(), 0.0);
  ASSERT_TRUE(c.has_gradient_clipping());
  EXPECT_EQ(c.gradient_clipping(), 1.0);
  ASSERT_TRUE(c.scheduler().params().has_warmup_num_steps());
  EXPECT_EQ(c.scheduler().params().warmup_num_steps(), 0);
  EXPECT_EQ(c.scheduler().params().warmup_max_lr(), 5e-5);  // the lr "auto" gave
  EXPECT_EQ(c.scheduler().params().warmup_min_lr(), 0);
  EXPECT_TRUE(c.bf16().enabled());
  EXPECT_TRUE(warnings.empty());
}

// fp16/bf16 "auto" are the Trainer's --fp16/--bf16, off unless given: fp32. The warm-up of 0 steps
// runs as DeepSpeed runs it, over max(2, 0) steps. A pbtxt value still wins.
TEST(ConfigLoader, AutoPrecisionIsOffUnlessThePbtxtTurnsItOn) {
  const std::string json = std::string(kTestdata) + "ds_hf_auto_precision.json";
  std::vector<std::string> warnings;
  TrainerConfigProto c = Load({"", json}, &warnings);
  ASSERT_TRUE(c.fp16().has_enabled());
  ASSERT_TRUE(c.bf16().has_enabled());
  EXPECT_FALSE(c.fp16().enabled());
  EXPECT_FALSE(c.bf16().enabled());
  absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->engine.precision, engine::Precision::kFloat32);
  EXPECT_EQ(v->effective.scheduler().params().warmup_num_steps(), 2);
  EXPECT_EQ(v->effective.scheduler().params().warmup_max_lr(), 5e-5);

  const std::string pbtxt = std::string(std::getenv("TEST_TMPDIR")) + "/fp16_on.pbtxt";
  std::ofstream(pbtxt) << "fp16 { enabled: true }\n";
  c = Load({pbtxt, json}, &warnings);
  EXPECT_TRUE(c.fp16().enabled());
  EXPECT_FALSE(c.bf16().enabled());
  v = ValidateConfig(c, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->engine.precision, engine::Precision::kFloat16);
}

TEST(ConfigLoader, AutoTheTrainerDoesNotFillIsAnErrorNamingTheField) {
  std::string s = LoadError({"", std::string(kTestdata) + "ds_auto_underivable.json"});
  EXPECT_THAT(s, HasSubstr("ds_auto_underivable.json: zero_optimization.stage is \"auto\""));
  EXPECT_THAT(s, HasSubstr("give it a value"));
}

TEST(ConfigLoader, AFieldSetInBothFilesIsAnError) {
  std::string s =
      LoadError({std::string(kTestdata) + "conflict.pbtxt", std::string(kConfigs) + "stage2.json"});
  EXPECT_THAT(s, HasSubstr("conflict.pbtxt"));
  EXPECT_THAT(s, HasSubstr("stage2.json"));
  EXPECT_THAT(s, HasSubstr("zero_optimization.stage (1 and 2)"));
  EXPECT_THAT(s, HasSubstr("zero_optimization.overlap_comm (true and true)"));
}

TEST(ConfigLoader, MissingFilesNameTheFlagAndPath) {
  EXPECT_THAT(LoadError({"/nonexistent/run.pbtxt", ""}),
              HasSubstr("--config=/nonexistent/run.pbtxt: cannot read"));
  EXPECT_THAT(LoadError({"", "/nonexistent/ds.json"}),
              HasSubstr("--ds_config=/nonexistent/ds.json: cannot read"));
}

TEST(ConfigLoader, MalformedFilesNameFileAndPosition) {
  std::string s = LoadError({std::string(kTestdata) + "bad_syntax.pbtxt", ""});
  // protobuf reports the position after the bad token: the field and value say what it was.
  EXPECT_THAT(s, HasSubstr("bad_syntax.pbtxt:5:1: "));
  EXPECT_THAT(s, HasSubstr("\"overlap_comm\""));
  EXPECT_THAT(s, HasSubstr("\"maybe\""));
  s = LoadError({std::string(kTestdata) + "unknown_field.pbtxt", ""});
  EXPECT_THAT(s, HasSubstr("unknown_field.pbtxt:2:"));
  EXPECT_THAT(s, HasSubstr("reduce_bucket_sz"));
  s = LoadError({"", std::string(kTestdata) + "bad_syntax.json"});
  EXPECT_THAT(s, HasSubstr("bad_syntax.json:3:36: not valid JSON"));  // the second comma
}

// A typo names the field's path and the nearest field there, as the JSON reader does.
TEST(ConfigLoader, UnknownPbtxtFieldNamesItsPathAndTheNearestName) {
  auto typo = ParsePbtxt("zero_optimization {\n  stage: 2 overlap_com: true\n}\n", "t.pbtxt");
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(std::string(typo.status().message()),
            "t.pbtxt:2:23: zero_optimization.overlap_com: unknown field (did you mean "
            "overlap_comm?)");
  auto nested = ParsePbtxt("zero_optimization { offload_param { devce: \"cpu\" } }", "t.pbtxt");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(std::string(nested.status().message()),
              HasSubstr("zero_optimization.offload_param.devce: unknown field (did you mean "
                        "device?)"));
  auto top = ParsePbtxt("steps_per_prnt: 3", "t.pbtxt");
  ASSERT_FALSE(top.ok());
  EXPECT_THAT(std::string(top.status().message()),
              HasSubstr("steps_per_prnt: unknown field (did you mean steps_per_print?)"));
  auto far = ParsePbtxt("colour: 3", "t.pbtxt");
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(std::string(far.status().message()), "t.pbtxt:1:7: colour: unknown field");
}

// A file given to the other flag says which flag it belongs to.
TEST(ConfigLoader, AFileGivenToTheWrongFlagSaysWhichItBelongsTo) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/ds.json") << "{\"train_micro_batch_size_per_gpu\": 4}\n";
  std::ofstream(dir + "/run.pbtxt") << "# a comment\ntrain_micro_batch_size_per_gpu: 4\n";
  EXPECT_THAT(LoadError({dir + "/ds.json", ""}),
              HasSubstr("(this is JSON: a DeepSpeed ds_config.json goes to --ds_config)"));
  EXPECT_THAT(LoadError({"", dir + "/run.pbtxt"}), HasSubstr("not valid JSON: unexpected '#'"));
  EXPECT_THAT(LoadError({"", dir + "/run.pbtxt"}),
              HasSubstr("(this is a protobuf text config: pass it with --config)"));
}

TEST(ConfigLoader, FullDeepSpeedFileLoadsEverySection) {
  std::vector<std::string> warnings;
  TrainerConfigProto c = Load({"", std::string(kTestdata) + "ds_full.json"}, &warnings);
  // Every key is DeepSpeed 0.19.8's; memory_breakdown and zero_optimization.legacy_stage1 have no
  // proto field and are accepted without a word (ds_keys.h).
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  const ZeroOptimizationConfig& z = c.zero_optimization();
  EXPECT_EQ(z.allgather_bucket_size(), 200000000);
  EXPECT_EQ(z.offload_param().buffer_size(), 100000000);
  EXPECT_EQ(z.offload_param().nvme_path(), "/local_nvme");
  const int64_t width = models::GptOptions{}.n_embd;  // the JSON has no model section
  EXPECT_EQ(z.stage3_prefetch_bucket_size(), static_cast<int64_t>(0.9 * width * width));
  EXPECT_EQ(z.stage3_param_persistence_threshold(), 10 * width);
  EXPECT_EQ(c.fp16().hysteresis(), 3);
  EXPECT_EQ(c.scheduler().params().cycle_second_step_size(), 30);
  EXPECT_EQ(c.activation_checkpointing().number_checkpoints(), 3);
  EXPECT_EQ(c.checkpoint().tag_validation(), "Fail");
  EXPECT_EQ(c.comms_logger().prof_ops_size(), 3);
  EXPECT_EQ(c.aio().queue_depth(), 16);
  EXPECT_EQ(c.tensorboard().output_path(), "/tmp/zt-tb");

  warnings.clear();
  absl::StatusOr<TrainerConfig> v = ValidateConfig(c, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->batch.gradient_accumulation_steps, 4);  // "auto": 64 / (8 x 2)
  EXPECT_EQ(v->engine.precision, engine::Precision::kBFloat16);
  EXPECT_FALSE(v->engine.adam.adamw);  // adam_w_mode: false
  EXPECT_EQ(v->engine.adam.beta1, 0.8);
  EXPECT_EQ(v->engine.fp16.initial_scale_power, 12);
  EXPECT_EQ(v->scheduler.type, "OneCycle");
  EXPECT_EQ(v->model.checkpoint_every, (models::GptOptions{}.n_layer + 2) / 3);  // ceil(layers / 3)
  EXPECT_TRUE(v->model.cpu_checkpointing);
  EXPECT_EQ(v->comms_logger.prof_ops,
            (std::vector<std::string>{"all_reduce", "reduce_scatter", "all_gather"}));
  EXPECT_EQ(v->metrics.csv_output_path, "/tmp/zt-csv");
  EXPECT_EQ(v->run.steps_per_print, 5);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("partition_activations"));
}

TEST(ConfigLoader, DeprecatedFilesLoad) {
  std::vector<std::string> warnings;
  TrainerConfigProto d = Load({"", std::string(kTestdata) + "ds_deprecated.json"}, &warnings);
  EXPECT_TRUE(d.bf16().enabled());
  EXPECT_TRUE(d.zero_optimization().stage3_gather_16bit_weights_on_model_save());
  EXPECT_EQ(warnings.size(), 4u);
  TrainerConfigProto legacy = Load({"", std::string(kTestdata) + "ds_legacy_zero.json"}, &warnings);
  EXPECT_EQ(legacy.zero_optimization().stage(), 1);
  EXPECT_EQ(legacy.zero_optimization().allgather_bucket_size(), 50000000);
  absl::StatusOr<TrainerConfig> v = ValidateConfig(d, 2, &warnings);
  EXPECT_TRUE(v.ok()) << v.status();
}

TEST(ConfigLoader, DeepSpeedTimeoutIsMinutesAndOnlyFillsAnUnsetField) {
  std::vector<std::string> warnings;
  // The JSON path leaves run.comm_timeout_s unset, so the variable reaches it.
  TrainerConfigProto json = Load({"", std::string(kConfigs) + "stage2.json"}, &warnings);
  EXPECT_FALSE(json.run().has_comm_timeout_s());
  ASSERT_TRUE(ApplyDeepSpeedTimeout("7", &json).ok());
  EXPECT_EQ(json.run().comm_timeout_s(), 7 * 60);
  absl::StatusOr<TrainerConfig> v = ValidateConfig(json, 2, &warnings);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->run.comm_timeout_s, 420);
  EXPECT_THAT(PrintConfig(v->effective), HasSubstr("comm_timeout_s: 420"));

  TrainerConfigProto set = *ParsePbtxt("run { comm_timeout_s: 12 }", "t.pbtxt");
  ASSERT_TRUE(ApplyDeepSpeedTimeout("7", &set).ok());
  EXPECT_EQ(set.run().comm_timeout_s(), 12);  // the config wins
  TrainerConfigProto unset;
  ASSERT_TRUE(ApplyDeepSpeedTimeout(nullptr, &unset).ok());
  EXPECT_FALSE(unset.run().has_comm_timeout_s());
  for (const char* bad : {"", "abc", "0", "-3", "1.5", "1441"}) {
    absl::Status s = ApplyDeepSpeedTimeout(bad, &unset);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("DEEPSPEED_TIMEOUT='", bad,
                                       "' is not a whole number of minutes in [1, 1440]")));
  }
}

}  // namespace
}  // namespace zerotrain::trainer
