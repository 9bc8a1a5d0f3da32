// Every ds_config section's keys against DeepSpeed 0.19.8 itself: the keys come from DeepSpeed at
// test time (ds_oracle.py fields: its pydantic models' fields, and the keys it looks up in the
// sections it reads as plain dicts), so a key DeepSpeed reads that zerotrain drops as unknown, a
// key zerotrain accepts that DeepSpeed does not have, and a section whose strictness differs
// cannot go unnoticed. Misspelt keys are fed to both: where DeepSpeed refuses one, zerotrain must
// too, and where DeepSpeed ignores it, zerotrain must name it in its unknown-key warning.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"
#include "trainer/config/ds_keys.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out);
  return out;
}

std::string Dotted(const std::string& section, const std::string& key) {
  return section.empty() ? key : absl::StrCat(section, ".", key);
}

// {"train_micro_batch_size_per_gpu": 1, <section>: {<key>: value}}, the section nested by its
// dots; more keys go in with Set.
struct Case {
  Struct root;
  Case() { (*root.mutable_fields())["train_micro_batch_size_per_gpu"].set_number_value(1); }
  Case& Set(const std::string& section, const std::string& key, const Value& value) {
    Struct* s = &root;
    if (!section.empty()) {
      for (absl::string_view part : absl::StrSplit(section, '.')) {
        s = (*s->mutable_fields())[std::string(part)].mutable_struct_value();
      }
    }
    (*s->mutable_fields())[key] = value;
    return *this;
  }
  std::string Write(const std::string& dir, const std::string& name) const {
    const std::string path = absl::StrCat(dir, "/", name, ".json");
    std::ofstream(path) << Json(root);
    return path;
  }
};

Value Parsed(const std::string& json) {
  Value v;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &v).ok()) << json;
  return v;
}

bool WarnsUnknown(const std::vector<std::string>& warnings, const std::string& dotted) {
  for (const std::string& w : warnings) {
    if (absl::StrContains(w, "unknown key") && absl::StrContains(w, dotted)) return true;
  }
  return false;
}

TEST(SectionKeysConformance, EveryDeepSpeedKeyIsZerotrainsAndNoOther) {
  absl::StatusOr<std::string> out = testing::RunOracle("tests/deepspeed/ds_oracle.py", {"fields"});
  ASSERT_TRUE(out.ok()) << out.status();
  absl::StatusOr<Struct> theirs = testing::ParseJsonObject(*out);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_GT(
      theirs->fields().at("").struct_value().fields().at("fields").struct_value().fields_size(),
      40)
      << *out;  // 0.19.8 reads 50 top-level keys
  const std::string dir = testing::OracleTempDir("section_fields");

  // DeepSpeed's side: each key (and alias) at its default loads without an unknown-key warning,
  // and is not refused; the keys DeepSpeed refuses as removed features are refused, naming them.
  std::vector<std::string> dropped, refused, removed_accepted;
  int loads = 0;
  for (const auto& [section, info] : theirs->fields()) {
    const auto& s = info.struct_value().fields();
    for (const auto& [name, field] : s.at("fields").struct_value().fields()) {
      const auto& f = field.struct_value().fields();
      std::vector<std::string> spellings = {name};
      if (!f.at("alias").string_value().empty()) spellings.push_back(f.at("alias").string_value());
      for (const std::string& key : spellings) {
        if (section.empty() && key == "train_micro_batch_size_per_gpu") continue;  // every case's
        const std::string path =
            Case().Set(section, key, f.at("default")).Write(dir, absl::StrCat("f", ++loads));
        std::vector<std::string> warnings;
        absl::StatusOr<TrainerConfig> c = testing::LoadDsConfig(path, 1, 0, &warnings);
        if (!c.ok())
          refused.push_back(absl::StrCat(Dotted(section, key), " (", c.status().message(), ")"));
        if (WarnsUnknown(warnings, Dotted(section, key))) dropped.push_back(Dotted(section, key));
      }
    }
    for (const Value& key : s.at("removed").list_value().values()) {
      Value empty;
      empty.mutable_struct_value();
      const std::string path =
          Case().Set(section, key.string_value(), empty).Write(dir, absl::StrCat("r", ++loads));
      absl::StatusOr<TrainerConfig> c = testing::LoadDsConfig(path, 1);
      if (c.ok() ||
          !absl::StrContains(c.status().message(), Dotted(section, key.string_value()) + ": ")) {
        removed_accepted.push_back(Dotted(section, key.string_value()));
      }
    }
  }
  EXPECT_GT(loads, 150);
  EXPECT_TRUE(refused.empty()) << "DeepSpeed's defaults refused: " << absl::StrJoin(refused, "; ");
  EXPECT_TRUE(dropped.empty()) << "DeepSpeed keys dropped as unknown: "
                               << absl::StrJoin(dropped, ", ");
  EXPECT_TRUE(removed_accepted.empty())
      << "keys DeepSpeed refuses (removed features) not refused naming them: "
      << absl::StrJoin(removed_accepted, ", ");

  // zerotrain's side: every section of its table is one DeepSpeed has, as strict as DeepSpeed's,
  // and every key it accepts there (proto fields and table keys) is one DeepSpeed has.
  std::vector<std::string> unknown_sections, strictness, extra;
  for (const DsSection& section : DeepSpeedSections()) {
    auto it = theirs->fields().find(section.path);
    if (it == theirs->fields().end()) {
      unknown_sections.push_back(section.path);
      continue;
    }
    const auto& s = it->second.struct_value().fields();
    if (s.at("strict").bool_value() != section.forbids_extra_keys) {
      strictness.push_back(absl::StrCat("\"", section.path, "\" (DeepSpeed ",
                                        s.at("strict").bool_value() ? "strict" : "lenient", ")"));
    }
    std::set<std::string> ds;
    for (const auto& [name, field] : s.at("fields").struct_value().fields()) {
      ds.insert(name);
      ds.insert(field.struct_value().fields().at("alias").string_value());
    }
    for (const Value& key : s.at("removed").list_value().values()) ds.insert(key.string_value());
    std::vector<std::string> ours;
    for (int i = 0; section.message != nullptr && i < section.message->field_count(); ++i) {
      const std::string& name = section.message->field(i)->name();
      // zerotrain's own sections.
      if (*section.path == '\0' && (name == "model" || name == "data" || name == "run")) continue;
      ours.push_back(name);
    }
    for (const DsKey& k : section.keys) {
      ours.push_back(k.key);
      if (*k.alias != '\0') ours.push_back(k.alias);
    }
    for (const std::string& key : ours) {
      if (!ds.count(key)) extra.push_back(Dotted(section.path, key));
    }
  }
  EXPECT_TRUE(unknown_sections.empty())
      << "sections DeepSpeed does not read: " << absl::StrJoin(unknown_sections, ", ");
  EXPECT_TRUE(strictness.empty()) << "unknown keys handled unlike DeepSpeed in: "
                                  << absl::StrJoin(strictness, ", ");
  EXPECT_TRUE(extra.empty()) << "keys zerotrain accepts that DeepSpeed 0.19.8 does not have: "
                             << absl::StrJoin(extra, ", ");
}

// A file for DeepSpeedConfig and zerotrain: `key` is the dotted path (and for a refused value,
// " = value") zerotrain's error must name.
struct Verdict {
  std::string name, key, json;
  bool removed = false;  // a removed feature's key: refused as such, not as an unknown key
};

// One misspelt (or removed) key per section; a few more in zero_optimization, the most used.
const std::vector<Verdict>& Typos() {
  static const auto* cases = new std::vector<Verdict>{
      {"tensorboard", "tensorboard.job_nam", R"({"tensorboard": {"job_nam": "x"}})"},
      {"csv", "csv_monitor.output_pth", R"({"csv_monitor": {"output_pth": "/tmp"}})"},
      {"wandb", "wandb.projct", R"({"wandb": {"enabled": false, "projct": "x"}})"},
      {"comet", "comet.api", R"({"comet": {"api": "k"}})"},
      {"comms", "comms_logger.prof_op", R"({"comms_logger": {"prof_op": ["all_reduce"]}})"},
      {"fp16", "fp16.loss_scale_windows", R"({"fp16": {"loss_scale_windows": 10}})"},
      // The name DeepSpeed's own BFLOAT16_FORMAT still shows.
      {"bf16", "bf16.check_overflow", R"({"bf16": {"enabled": true, "check_overflow": true}})"},
      {"offload_opt", "zero_optimization.offload_optimizer.devce",
       R"({"zero_optimization": {"stage": 1, "offload_optimizer": {"devce": "cpu"}}})"},
      {"offload_param", "zero_optimization.offload_param.max_in_gpu",
       R"({"zero_optimization": {"stage": 3, "offload_param": {"max_in_gpu": 1}}})"},
      {"top", "gradient_clip", R"({"gradient_clip": 0.5})"},
      {"aio", "aio.queue_dept", R"({"aio": {"queue_dept": 4}})"},
      {"checkpoint", "checkpoint.tag_validaton", R"({"checkpoint": {"tag_validaton": "Fail"}})"},
      {"writer", "checkpoint.writer.typ", R"({"checkpoint": {"writer": {"typ": "FAST"}}})"},
      {"parallel_write", "checkpoint.parallel_write.pipeline",
       R"({"checkpoint": {"parallel_write": {"pipeline": true}}})"},
      {"ac", "activation_checkpointing.number_checkpoint",
       R"({"activation_checkpointing": {"number_checkpoint": 2}})"},
      {"flops", "flops_profiler.profile_stp", R"({"flops_profiler": {"profile_stp": 2}})"},
      {"autocast", "torch_autocast.enable", R"({"torch_autocast": {"enable": true}})"},
      {"data_types", "data_types.grad_dtype", R"({"data_types": {"grad_dtype": "fp32"}})"},
      {"zero_overlap", "zero_optimization.overlap_com",
       R"({"zero_optimization": {"stage": 2, "overlap_com": true}})"},
      {"zero_bucket", "zero_optimization.reduce_bucket",
       R"({"zero_optimization": {"reduce_bucket": 1000}})"},
      {"zero_stage3", "zero_optimization.stage3_prefetch_bucket",
       R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket": 1000}})"},
      {"zero_offload", "zero_optimization.offload_optimiser",
       R"({"zero_optimization": {"offload_optimiser": {"device": "cpu"}}})"},
      {"amp", "amp", R"({"amp": {"enabled": false}})", true},
      {"sparse_gradients", "sparse_gradients", R"({"sparse_gradients": false})", true},
      {"mics", "zero_optimization.mics_shard_size",
       R"({"zero_optimization": {"stage": 3, "mics_shard_size": -1}})", true},
  };
  return *cases;
}

// DeepSpeed keys zerotrain has no field for, at a value that asks for what zerotrain does not do.
const std::vector<Verdict>& Unhonoured() {
  static const auto* cases = new std::vector<Verdict>{
      {"bf16_immediate", "bf16.immediate_grad_update = true",
       R"({"zero_optimization": {"stage": 1},
           "bf16": {"enabled": true, "immediate_grad_update": true}})"},
      {"allreduce_sum", "gradient_allreduce_op = \"sum\"",
       R"({"zero_optimization": {"stage": 1}, "gradient_allreduce_op": "sum"})"},
      {"grad_accum", "data_types.grad_accum_dtype = \"fp32\"",
       R"({"data_types": {"grad_accum_dtype": "fp32"}})"},
      {"legacy_stage1", "zero_optimization.legacy_stage1 = true",
       R"({"zero_optimization": {"stage": 1, "legacy_stage1": true}})"},
  };
  return *cases;
}

std::string CaseDir() { return testing::OracleTempDir("section_verdicts"); }

// DeepSpeedConfig's verdict on every case of both lists, from one oracle run.
const Struct& DeepSpeedVerdicts() {
  static const Struct* verdicts = [] {
    for (const auto* list : {&Typos(), &Unhonoured()}) {
      for (const Verdict& v : *list) {
        Case c;
        const Value parsed = Parsed(v.json);
        for (const auto& [k, value] : parsed.struct_value().fields()) {
          (*c.root.mutable_fields())[k] = value;
        }
        c.Write(CaseDir(), v.name);
      }
    }
    absl::StatusOr<std::string> out =
        testing::RunOracle("tests/deepspeed/ds_oracle.py", {"accepts", CaseDir()});
    EXPECT_TRUE(out.ok()) << out.status();
    absl::StatusOr<Struct> parsed = testing::ParseJsonObject(out.ok() ? *out : "");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return new Struct(parsed.ok() ? *parsed : Struct());
  }();
  return *verdicts;
}

TEST(SectionKeysConformance, MisspeltKeysAreRefusedWhereDeepSpeedRefusesThem) {
  const Struct& theirs = DeepSpeedVerdicts();
  ASSERT_EQ(theirs.fields_size(), Typos().size() + Unhonoured().size());
  int refused_by_deepspeed = 0;
  for (const Verdict& t : Typos()) {
    const std::string& verdict = theirs.fields().at(t.name).string_value();
    SCOPED_TRACE(absl::StrCat(t.json, " -> DeepSpeed: ", verdict));
    std::vector<std::string> warnings;
    absl::StatusOr<TrainerConfig> ours =
        testing::LoadDsConfig(absl::StrCat(CaseDir(), "/", t.name, ".json"), 1, 0, &warnings);
    if (absl::StartsWith(verdict, "error")) {
      ++refused_by_deepspeed;
      ASSERT_FALSE(ours.ok()) << "zerotrain accepted what DeepSpeed refuses";
      EXPECT_TRUE(absl::StrContains(ours.status().message(), t.key)) << ours.status();
      if (!t.removed) {
        EXPECT_TRUE(absl::StrContains(ours.status().message(), "unknown key")) << ours.status();
      }
    } else {
      ASSERT_TRUE(ours.ok()) << ours.status();
      EXPECT_TRUE(WarnsUnknown(warnings, t.key)) << absl::StrJoin(warnings, "\n");
    }
  }
  // Both kinds are exercised: 13 keys in 9 pydantic sections and 3 removed keys; 9 plain dicts.
  EXPECT_EQ(refused_by_deepspeed, 16);
}

// DeepSpeed takes these; zerotrain refuses them naming the key and value.
TEST(SectionKeysConformance, UnhonouredValuesAreRefusedNamingTheKey) {
  const Struct& theirs = DeepSpeedVerdicts();
  ASSERT_EQ(theirs.fields_size(), Typos().size() + Unhonoured().size());
  for (const Verdict& t : Unhonoured()) {
    SCOPED_TRACE(t.json);
    EXPECT_EQ(theirs.fields().at(t.name).string_value(), "ok");
    absl::StatusOr<TrainerConfig> ours =
        testing::LoadDsConfig(absl::StrCat(CaseDir(), "/", t.name, ".json"), 1);
    ASSERT_FALSE(ours.ok());
    EXPECT_TRUE(absl::StrContains(ours.status().message(), t.key + ": not supported by zerotrain"))
        << ours.status();
  }
}

}  // namespace
}  // namespace zerotrain::trainer
