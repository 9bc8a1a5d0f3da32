// ParseDsJson: numbers, types, "auto", null, unknown keys, deprecated spellings and
// unimplemented sections, each with the error or warning naming the key.
#include "trainer/config/ds_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace zerotrain::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

DsJson Parse(const std::string& json) {
  absl::StatusOr<DsJson> r = ParseDsJson(json, "t.json");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : DsJson{};
}

std::string Error(const std::string& json) {
  absl::StatusOr<DsJson> r = ParseDsJson(json, "t.json");
  EXPECT_FALSE(r.ok()) << json;
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(DsJson, IntegralNumbersInAnyNotationFillIntegerFields) {
  DsJson d = Parse(R"({"train_batch_size": 3.2e1, "zero_optimization":
      {"reduce_bucket_size": 5e8, "allgather_bucket_size": 5.0e8, "stage": 2.0}})");
  EXPECT_EQ(d.config.train_batch_size(), 32);
  EXPECT_EQ(d.config.zero_optimization().reduce_bucket_size(), 500000000);
  EXPECT_EQ(d.config.zero_optimization().allgather_bucket_size(), 500000000);
  EXPECT_EQ(d.config.zero_optimization().stage(), 2);
  EXPECT_TRUE(d.warnings.empty());
}

TEST(DsJson, FractionalOrOutOfRangeIntegersNameTheField) {
  std::string e = Error(R"({"zero_optimization": {"reduce_bucket_size": 2.5}})");
  EXPECT_THAT(e, HasSubstr("t.json"));
  EXPECT_THAT(e, HasSubstr("zero_optimization.reduce_bucket_size"));
  EXPECT_THAT(e, HasSubstr("2.5"));
  e = Error(R"({"zero_optimization": {"stage": 1e10}})");
  EXPECT_THAT(e, HasSubstr("zero_optimization.stage"));
  EXPECT_THAT(e, HasSubstr("out of range"));
  EXPECT_THAT(Error(R"({"data": {"seed": -1}})"), HasSubstr("data.seed"));
}

TEST(DsJson, WrongTypesNameTheFieldAndValue) {
  std::string e = Error(R"({"zero_optimization": {"overlap_comm": "yes"}})");
  EXPECT_THAT(e, HasSubstr("zero_optimization.overlap_comm"));
  EXPECT_THAT(e, HasSubstr("\"yes\""));
  EXPECT_THAT(Error(R"({"optimizer": {"params": {"betas": 0.9}}})"),
              HasSubstr("optimizer.params.betas: expected a list"));
  EXPECT_THAT(Error(R"({"optimizer": {"params": {"betas": [0.9, "x"]}}})"),
              HasSubstr("optimizer.params.betas[1]"));
  EXPECT_THAT(Error(R"({"optimizer": {"type": 3}})"), HasSubstr("optimizer.type"));
  EXPECT_THAT(Error(R"({"fp16": true})"), HasSubstr("fp16: expected an object"));
}

TEST(DsJson, AutoIsRecordedAndLeftUnset) {
  DsJson d = Parse(R"({"train_batch_size": "auto", "zero_optimization":
      {"stage": 2, "reduce_bucket_size": "auto"}, "optimizer": {"params": {"lr": "auto"}}})");
  EXPECT_FALSE(d.config.has_train_batch_size());
  EXPECT_FALSE(d.config.zero_optimization().has_reduce_bucket_size());
  EXPECT_FALSE(d.config.optimizer().params().has_lr());
  EXPECT_THAT(d.auto_fields, ElementsAre("optimizer.params.lr", "train_batch_size",
                                         "zero_optimization.reduce_bucket_size"));
}

TEST(DsJson, NullMeansDefault) {
  DsJson d = Parse(R"({"zero_optimization": {"offload_optimizer": {"nvme_path": null}}})");
  EXPECT_FALSE(d.config.zero_optimization().offload_optimizer().has_nvme_path());
}

// Where DeepSpeed reads a plain dict (the top level, aio, checkpoint, activation_checkpointing,
// flops_profiler, ...) it ignores keys it does not know; zerotrain names them in one warning.
TEST(DsJson, UnknownKeysAreDroppedWithOneWarningListingThemAll) {
  DsJson d = Parse(R"({"memory_breakdown": true, "train_batch_size": 8,
      "zero_optimization": {"stage": 1}, "wall_clock_breakdown": false, "foo": {"bar": 1},
      "aio": {"queue_dept": 4}, "flops_profiler": {"enabled": false, "profile_stp": 2},
      "checkpoint": {"writer": {"typ": "FAST"}}})");
  EXPECT_EQ(d.config.train_batch_size(), 8);
  EXPECT_EQ(d.config.zero_optimization().stage(), 1);
  ASSERT_EQ(d.warnings.size(), 1u);
  EXPECT_THAT(d.warnings[0], HasSubstr("t.json"));
  // memory_breakdown is DeepSpeed's (a log switch): accepted, not unknown.
  EXPECT_THAT(d.warnings[0],
              HasSubstr("ignoring unknown key(s) aio.queue_dept (did you mean queue_depth?), "
                        "checkpoint.writer.typ (did you mean type?), flops_profiler.profile_stp "
                        "(did you mean profile_step?), foo"));
}

// DeepSpeed's pydantic sections (tensorboard, csv_monitor, wandb, comet, comms_logger, fp16,
// bf16, the offload sections) forbid extra keys, whether the section is on or not.
TEST(DsJson, UnknownKeysInDeepSpeedModelSectionsAreErrors) {
  EXPECT_THAT(Error(R"({"tensorboard": {"enabled": true, "job_nam": "x"}})"),
              HasSubstr("t.json: tensorboard.job_nam (did you mean job_name?): unknown key "
                        "(DeepSpeed 0.19.8 rejects it "
                        "too: its tensorboard model forbids extra keys"));
  EXPECT_THAT(Error(R"({"wandb": {"enabled": false, "projct": "x"}})"),
              HasSubstr("wandb.projct (did you mean project?): unknown key"));
  EXPECT_THAT(Error(R"({"comms_logger": {"prof_op": ["all_reduce"]}})"),
              HasSubstr("comms_logger.prof_op (did you mean prof_ops?): unknown key"));
  EXPECT_THAT(Error(R"({"bf16": {"enabled": true, "check_overflow": false}})"),
              HasSubstr("bf16.check_overflow: unknown key"));
  EXPECT_THAT(
      Error(R"({"zero_optimization": {"offload_param": {"devce": "cpu"}}})"),
      HasSubstr("zero_optimization.offload_param.devce (did you mean device?): unknown key"));
  // Their DeepSpeed keys without a proto field: accepted where they cannot matter or at the
  // default, refused otherwise.
  DsJson d = Parse(R"({"wandb": {"enabled": false, "project": "p", "team": null},
      "comet": {"samples_log_interval": 5}, "bf16": {"enabled": true,
      "immediate_grad_update": false}, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "cpuadam_cores_perc": 0.5}}})");
  EXPECT_TRUE(d.warnings.empty());
  EXPECT_THAT(Error(R"({"bf16": {"enabled": true, "immediate_grad_update": true}})"),
              HasSubstr("bf16.immediate_grad_update = true: not supported by zerotrain"));
  EXPECT_THAT(Error(R"({"aio": {"use_gds": true}})"),
              HasSubstr("aio.use_gds = true: not supported by zerotrain (GPUDirect Storage)"));
}

// DeepSpeed top-level keys zerotrain has no field for.
TEST(DsJson, DeepSpeedOnlyTopLevelKeys) {
  DsJson d = Parse(R"({"dump_state": true, "log_level": "info", "vocabulary_size": 50257,
      "timers": {"throughput": {"enabled": false}}, "gradient_allreduce_op": "MEAN",
      "communication_data_type": null, "data_types": {"grad_accum_dtype": null},
      "checkpoint": {"checkpoint_serialization": false, "writer": {"type": "FAST"}},
      "compile": {"deepcompile": false}, "torch_autocast": {"enabled": false}})");
  EXPECT_TRUE(d.warnings.empty()) << d.warnings.front();
  EXPECT_THAT(Error(R"({"gradient_allreduce_op": "sum"})"),
              HasSubstr("gradient_allreduce_op = \"sum\": not supported by zerotrain"));
  EXPECT_THAT(Error(R"({"data_types": {"grad_accum_dtype": "fp32"}})"),
              HasSubstr("data_types.grad_accum_dtype = \"fp32\": not supported"));
  EXPECT_THAT(Error(R"({"compile": {"deepcompile": true}})"),
              HasSubstr("compile: DeepCompile is not implemented in zerotrain"));
  EXPECT_THAT(Error(R"({"checkpoint": {"writer": true}})"),
              HasSubstr("checkpoint.writer: expected an object"));
}

// aio.thread_count is intra_op_parallelism's old name.
TEST(DsJson, AioThreadCountIsIntraOpParallelism) {
  DsJson d = Parse(R"({"aio": {"thread_count": 2}})");
  EXPECT_EQ(d.config.aio().intra_op_parallelism(), 2);
  ASSERT_EQ(d.warnings.size(), 1u);
  EXPECT_THAT(d.warnings[0], HasSubstr("aio.thread_count is DeepSpeed's old name"));
  EXPECT_THAT(Error(R"({"aio": {"thread_count": 2, "intra_op_parallelism": 2}})"),
              HasSubstr("are one setting"));
}

// DeepSpeed 0.19.8's zero_optimization model forbids extra keys, and its optimizer and scheduler
// constructors reject unknown keywords: so do we, naming every key.
TEST(DsJson, UnknownKeysInsideZeroOptimizerAndSchedulerParamsAreErrors) {
  std::string e = Error(R"({"zero_optimization": {"stage": 2, "overlap_com": true,
      "reduce_bucket": 5}})");
  EXPECT_THAT(e, HasSubstr("t.json: zero_optimization.overlap_com (did you mean overlap_comm?), "
                           "zero_optimization.reduce_bucket (did you mean reduce_bucket_size?): "
                           "unknown key"));
  EXPECT_THAT(Error(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.1, "betas1": 0.9}}})"),
              HasSubstr("optimizer.params.betas1: not a parameter of any optimizer"));
  EXPECT_THAT(Error(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_step": 9}}})"),
              HasSubstr("scheduler.params.warmup_step: not a parameter of any scheduler"));
  // The keywords that choose how DeepSpeed's or torch's class runs are read; which type takes
  // which is ValidateConfig's (config_optimizer.cc).
  DsJson d = Parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.1,
      "set_grad_none": true, "foreach": null, "fp32_optimizer_states": true}}})");
  EXPECT_EQ(d.config.optimizer().params().lr(), 0.1);
  EXPECT_TRUE(d.config.optimizer().params().set_grad_none());
  EXPECT_FALSE(d.config.optimizer().params().has_foreach());
  EXPECT_TRUE(d.warnings.empty());
  EXPECT_THAT(Error(R"({"optimizer": {"type": "AdamW", "params": {"maximize": 1}}})"),
              HasSubstr("optimizer.params.maximize: expected true or false"));
}

// DeepSpeed names the stage-3 keys without the prefix (the stage3_ spellings are aliases).
TEST(DsJson, Stage3KeysWithoutThePrefixAreTheSameKeys) {
  DsJson d = Parse(R"({"zero_optimization": {"stage": 3, "prefetch_bucket_size": 1234,
      "max_live_parameters": 5e6, "stage3_param_persistence_threshold": 77,
      "model_persistence_threshold": 9223372036854775807}})");
  const ZeroOptimizationConfig& z = d.config.zero_optimization();
  EXPECT_EQ(z.stage3_prefetch_bucket_size(), 1234);
  EXPECT_EQ(z.stage3_max_live_parameters(), 5000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold(), 77);
  EXPECT_EQ(z.stage3_model_persistence_threshold(), INT64_MAX);  // sys.maxsize
  EXPECT_TRUE(d.warnings.empty());
  EXPECT_THAT(Error(R"({"zero_optimization": {"prefetch_bucket_size": 1,
      "stage3_prefetch_bucket_size": 2}})"),
              HasSubstr("zero_optimization.prefetch_bucket_size and "
                        "zero_optimization.stage3_prefetch_bucket_size are one setting"));
}

// Keys of DeepSpeed's model that zerotrain has no field for: accepted at DeepSpeed's default or
// where they cannot matter, refused otherwise.
TEST(DsJson, DeepSpeedOnlyZeroKeysAreAcceptedAtTheirDefaultAndRefusedOtherwise) {
  DsJson d = Parse(R"({"zero_optimization": {"legacy_stage1": false, "compute_grad_norm": true,
      "zenflow": null, "override_module_apply": false, "log_trace_cache_warnings": true,
      "leaf_module": {"classes": ["X"]}}})");
  EXPECT_TRUE(d.warnings.empty());
  EXPECT_THAT(Error(R"({"zero_optimization": {"legacy_stage1": true}})"),
              HasSubstr("zero_optimization.legacy_stage1 = true: not supported by zerotrain"));
  EXPECT_THAT(Error(R"({"zero_optimization": {"module_granularity_threshold": 5}})"),
              HasSubstr("set DeepSpeed's default 0"));
}

TEST(DsJson, DeprecatedBfloat16IsBf16) {
  DsJson d = Parse(R"({"bfloat16": {"enabled": true}})");
  EXPECT_TRUE(d.config.bf16().enabled());
  ASSERT_EQ(d.warnings.size(), 1u);
  EXPECT_THAT(d.warnings[0], HasSubstr("bfloat16 is deprecated"));
}

TEST(DsJson, DeprecatedBareZeroOptimization) {
  DsJson on = Parse(R"({"zero_optimization": true, "allgather_size": 5e7})");
  EXPECT_EQ(on.config.zero_optimization().stage(), 1);  // DeepSpeed: true = stage 1
  EXPECT_EQ(on.config.zero_optimization().allgather_bucket_size(), 50000000);
  EXPECT_EQ(Parse(R"({"zero_optimization": false})").config.zero_optimization().stage(), 0);
  EXPECT_EQ(Parse(R"({"zero_optimization": 2})").config.zero_optimization().stage(), 2);
}

TEST(DsJson, DeprecatedCpuOffloadBecomesOffloadSections) {
  DsJson d = Parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true,
      "cpu_offload_params": true, "cpu_offload_use_pin_memory": true,
      "stage3_gather_fp16_weights_on_model_save": true}})");
  const ZeroOptimizationConfig& z = d.config.zero_optimization();
  EXPECT_EQ(z.offload_optimizer().device(), "cpu");
  EXPECT_TRUE(z.offload_optimizer().pin_memory());
  EXPECT_EQ(z.offload_param().device(), "cpu");
  EXPECT_TRUE(z.offload_param().pin_memory());
  EXPECT_TRUE(z.stage3_gather_16bit_weights_on_model_save());
  EXPECT_EQ(d.warnings.size(), 4u);

  DsJson off = Parse(R"({"zero_optimization": {"cpu_offload": false}})");
  EXPECT_FALSE(off.config.zero_optimization().has_offload_optimizer());
  EXPECT_THAT(Error(R"({"zero_optimization": {"cpu_offload": true,
      "offload_optimizer": {"device": "nvme"}}})"),
              HasSubstr("zero_optimization.cpu_offload and zero_optimization.offload_optimizer"));
}

TEST(DsJson, UnimplementedFeatureSectionsFailOnlyWhenEnabled) {
  absl::StatusOr<DsJson> flops =
      ParseDsJson(R"({"flops_profiler": {"enabled": true, "profile_step": 3}})", "t.json");
  ASSERT_FALSE(flops.ok());
  EXPECT_EQ(flops.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(flops.status().message(),
              HasSubstr("t.json: flops_profiler: the FLOPS profiler is not implemented"));
  EXPECT_THAT(Error(R"({"pipeline": {"stages": 2}})"), HasSubstr("pipeline"));
  EXPECT_THAT(Error(R"({"wandb": {"enabled": true}})"), HasSubstr("wandb"));
  DsJson off = Parse(R"({"flops_profiler": {"enabled": false, "profile_step": 3},
      "wandb": {"enabled": false}, "pipeline": {}, "hybrid_engine": {"enabled": false}})");
  EXPECT_TRUE(off.warnings.empty());
}

// DeepSpeed 0.19.8 refuses the sections of features it removed, whatever they say.
TEST(DsJson, SectionsDeepSpeedRemovedAreRefused) {
  EXPECT_THAT(Error(R"({"amp": {"enabled": false}})"),
              HasSubstr("t.json: amp: NVIDIA Apex AMP (use bf16 or fp16) was removed from "
                        "DeepSpeed, and 0.19.8 refuses the key too"));
  EXPECT_THAT(Error(R"({"sparse_gradients": false})"), HasSubstr("sparse_gradients"));
  EXPECT_THAT(Error(R"({"zero_optimization": {"mics_shard_size": -1}})"),
              HasSubstr("zero_optimization.mics_shard_size: MiCS was removed"));
}

TEST(DsJson, MalformedJsonNamesTheFile) {
  EXPECT_THAT(Error(R"({"train_batch_size": 16, "zero_optimization": {"stage": 2})"),
              HasSubstr("t.json:1:59: not valid JSON"));
  // What protobuf's reader accepts by itself is refused before it runs.
  EXPECT_THAT(Error(R"({"train_batch_size": 16,})"), HasSubstr("t.json:1:24: not valid JSON"));
  EXPECT_THAT(Error("[1, 2]"), HasSubstr("t.json: expected a JSON object"));
}

}  // namespace
}  // namespace zerotrain::trainer
