// The optimizer section against DeepSpeed 0.19.8 itself (ds_oracle.py optimizer): for each path
// DeepSpeed's engine takes for a type zerotrain accepts (FusedAdam, torch's Adam/AdamW with
// torch_adam, DeepSpeedCPUAdam and DeepSpeedCPUAdagrad with offload_optimizer, torch's SGD and
// Adagrad, FusedLamb), the class it builds, the params keys it takes (the constructor's keywords
// and the keys the engine reads itself) and the defaults it runs with. zerotrain must load every
// such key at DeepSpeed's default, refuse every other key naming it, and resolve the same
// defaults in its effective configuration (what --print_config shows).
#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"
#include "trainer/config/ds_keys.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Struct;
using google::protobuf::Value;

const Struct& Oracle() {
  static const Struct* out = [] {
    absl::StatusOr<std::string> text =
        testing::RunOracle("tests/deepspeed/ds_oracle.py", {"optimizer"});
    EXPECT_TRUE(text.ok()) << text.status();
    absl::StatusOr<Struct> parsed = testing::ParseJsonObject(text.ok() ? *text : "");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return new Struct(parsed.ok() ? *parsed : Struct());
  }();
  return *out;
}

const google::protobuf::Map<std::string, Value>& Paths() {
  return Oracle().fields().at("paths").struct_value().fields();
}

std::set<std::string> Strings(const Value& list) {
  std::set<std::string> out;
  for (const Value& v : list.list_value().values()) out.insert(v.string_value());
  return out;
}

// The path's ds_config with `params` added to its optimizer params; zerotrain's result.
struct Loaded {
  absl::StatusOr<TrainerConfig> config;
  std::vector<std::string> warnings;
};

Loaded Load(const std::string& path_name, const Struct& config, const Struct& params) {
  static int n = 0;
  Struct root = config;
  Struct* opt = (*root.mutable_fields())["optimizer"].mutable_struct_value();
  Struct* p = (*opt->mutable_fields())["params"].mutable_struct_value();
  for (const auto& [k, v] : params.fields()) (*p->mutable_fields())[k] = v;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(root, &json);
  static const std::string dir = testing::OracleTempDir("optimizer_keys");
  const std::string file = absl::StrCat(dir, "/", path_name, "_", ++n, ".json");
  std::ofstream(file) << json;
  Loaded out{absl::InternalError("unset"), {}};
  out.config = testing::LoadDsConfig(file, 1, 0, &out.warnings);
  return out;
}

Struct One(const std::string& key, const Value& value) {
  Struct s;
  (*s.mutable_fields())[key] = value;
  return s;
}

bool MentionsOptimizerKey(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) {
    if (absl::StrContains(w, "optimizer.")) return true;
  }
  return false;
}

// Keywords DeepSpeed takes whose DeepSpeed default zerotrain refuses, with the reason. None: every
// one of them loads at its default.
const std::map<std::string, std::string>& RefusedAtDefault() {
  static const auto* m = new std::map<std::string, std::string>{};
  return *m;
}

// Values DeepSpeed takes and zerotrain refuses (naming key and value), where the path takes the
// key.
struct RefusedValue {
  const char* key;
  bool value;
  const char* only_class;  // "" = every class that takes the key
  const char* why;
};
constexpr RefusedValue kRefusedValues[] = {
    {"maximize", true, "", "gradient ascent; the engine descends"},
    {"fp32_optimizer_states", false, "deepspeed.ops.adagrad.DeepSpeedCPUAdagrad",
     "states in the parameters' dtype; zerotrain's are fp32"},
};

// DeepSpeed's default for a key the path takes: the path's own value, the constructor's default,
// else the default of the engine's pop().
Value DefaultOf(const Struct& info, const std::string& key) {
  const auto& given = info.fields().at("config").struct_value().fields().at("optimizer");
  const auto& opt = given.struct_value().fields();
  if (opt.count("params") && opt.at("params").struct_value().fields().count(key)) {
    return opt.at("params").struct_value().fields().at(key);
  }
  const auto& sig = info.fields().at("signature").struct_value().fields();
  if (sig.count(key)) return sig.at(key);
  return Oracle().fields().at("pops").struct_value().fields().at(key);
}

TEST(OptimizerKeysConformance, EveryKeywordDeepSpeedTakesLoadsAtItsDefault) {
  ASSERT_GE(Paths().size(), 11u);
  std::vector<std::string> refused, warned;
  int loads = 0;
  for (const auto& [name, info] : Paths()) {
    const Struct& i = info.struct_value();
    const Struct& config = i.fields().at("config").struct_value();
    for (const std::string& key : Strings(i.fields().at("accepted"))) {
      Loaded l = Load(name, config, One(key, DefaultOf(i, key)));
      ++loads;
      const std::string where = absl::StrCat(name, ": ", key);
      if (!l.config.ok() && !RefusedAtDefault().count(key)) {
        refused.push_back(absl::StrCat(where, " (", l.config.status().message(), ")"));
      }
      if (MentionsOptimizerKey(l.warnings)) {
        warned.push_back(absl::StrCat(where, " (", absl::StrJoin(l.warnings, "; "), ")"));
      }
    }
    for (const RefusedValue& r : kRefusedValues) {
      if (!Strings(i.fields().at("accepted")).count(r.key)) continue;
      if (*r.only_class != '\0' && i.fields().at("class").string_value() != r.only_class) continue;
      Value v;
      v.set_bool_value(r.value);
      Loaded l = Load(name, config, One(r.key, v));
      const std::string named =
          absl::StrCat("optimizer.params.", r.key, " = ", r.value ? "true" : "false");
      EXPECT_FALSE(l.config.ok()) << name << ": " << named << " (" << r.why << ") accepted";
      if (!l.config.ok()) {
        EXPECT_TRUE(absl::StrContains(l.config.status().message(), named))
            << name << ": " << l.config.status();
      }
    }
  }
  EXPECT_GT(loads, 80);
  EXPECT_TRUE(refused.empty()) << "DeepSpeed's keywords refused at their defaults:\n"
                               << absl::StrJoin(refused, "\n");
  EXPECT_TRUE(warned.empty()) << "warned about:\n" << absl::StrJoin(warned, "\n");
}

// Any key the path's class does not take (another path's, or a zerotrain field) is refused
// naming it, as DeepSpeed's constructor raises a TypeError for it.
TEST(OptimizerKeysConformance, KeywordsThePathDoesNotTakeAreRefused) {
  ASSERT_GE(Paths().size(), 11u);
  // Every key of every path and every field of OptimizerParams, with a non-null value.
  std::map<std::string, Value> all;
  for (const auto& [name, info] : Paths()) {
    for (const std::string& key : Strings(info.struct_value().fields().at("accepted"))) {
      Value v = DefaultOf(info.struct_value(), key);
      if (v.has_null_value()) v.set_bool_value(false);  // foreach, fused: bool or None
      if (!all.count(key) || all[key].has_null_value()) all[key] = v;
    }
  }
  const google::protobuf::Descriptor* d = OptimizerParams::descriptor();
  for (int f = 0; f < d->field_count(); ++f) {
    if (all.count(d->field(f)->name())) continue;
    Value v;
    if (d->field(f)->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
      v.set_bool_value(false);
    } else {
      v.set_number_value(1);
    }
    all[d->field(f)->name()] = v;
  }
  std::vector<std::string> accepted;
  for (const auto& [name, info] : Paths()) {
    const Struct& i = info.struct_value();
    const std::set<std::string> takes = Strings(i.fields().at("accepted"));
    for (const auto& [key, value] : all) {
      if (takes.count(key)) continue;
      Loaded l = Load(name, i.fields().at("config").struct_value(), One(key, value));
      if (l.config.ok() ||
          !absl::StrContains(l.config.status().message(), "optimizer.params." + key)) {
        accepted.push_back(
            absl::StrCat(name, " (", i.fields().at("class").string_value(), "): ", key));
      }
    }
  }
  EXPECT_TRUE(accepted.empty())
      << "keys DeepSpeed's class does not take, not refused naming them:\n"
      << absl::StrJoin(accepted, "\n");
}

// What each name in DeepSpeed's defaults is in zerotrain's effective optimizer params.
const std::map<std::string, std::string>& EffectiveName() {
  static const auto* m = new std::map<std::string, std::string>{
      {"adamw_mode", "adam_w_mode"},              // DeepSpeedCPUAdam's spelling
      {"decoupled_weight_decay", "adam_w_mode"},  // torch.optim.Adam(W)'s param group
  };
  return *m;
}

// Keywords that choose how a class runs, not what it computes: not part of the effective config.
const std::set<std::string>& ImplementationOnly() {
  static const auto* s = new std::set<std::string>{
      "foreach",
      "fused",
      "capturable",
      "differentiable",
      "set_grad_none",
      "maximize",               // false only (above)
      "fp32_optimizer_states",  // true only where used (above)
      "max_grad_norm",          // FusedLamb's; DeepSpeed's engine refuses it (below)
  };
  return *s;
}

TEST(OptimizerKeysConformance, DefaultsAreThoseDeepSpeedRunsWith) {
  ASSERT_GE(Paths().size(), 11u);
  int compared = 0;
  for (const auto& [name, info] : Paths()) {
    const Struct& i = info.struct_value();
    SCOPED_TRACE(absl::StrCat(name, " (", i.fields().at("class").string_value(), ")"));
    Loaded l = Load(name, i.fields().at("config").struct_value(), Struct());
    ASSERT_TRUE(l.config.ok()) << l.config.status();
    const OptimizerParams& eff = l.config->effective.optimizer().params();
    const auto* r = eff.GetReflection();
    for (const auto& [ds_name, value] : i.fields().at("defaults").struct_value().fields()) {
      if (ImplementationOnly().count(ds_name)) continue;
      const std::string key =
          EffectiveName().count(ds_name) ? EffectiveName().at(ds_name) : ds_name;
      const FieldDescriptor* fd = OptimizerParams::descriptor()->FindFieldByName(key);
      ASSERT_NE(fd, nullptr) << ds_name << ": a DeepSpeed default zerotrain has no field for";
      ++compared;
      if (fd->is_repeated()) {
        const std::vector<double> want = testing::Numbers(value);
        std::vector<double> got;
        for (int k = 0; k < r->FieldSize(eff, fd); ++k)
          got.push_back(r->GetRepeatedDouble(eff, fd, k));
        EXPECT_EQ(got, want) << key;
        continue;
      }
      ASSERT_TRUE(r->HasField(eff, fd)) << key << ": not in zerotrain's effective config";
      if (fd->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
        EXPECT_EQ(r->GetBool(eff, fd), value.bool_value()) << key;
      } else {
        EXPECT_EQ(r->GetDouble(eff, fd), value.number_value()) << key;
      }
    }
  }
  EXPECT_GT(compared, 50);
}

// A misspelt keyword is a TypeError in DeepSpeed (torch's classes constructed, DeepSpeed's bound
// to their signature); max_grad_norm is refused by DeepSpeed's engine for every type.
TEST(OptimizerKeysConformance, MisspeltKeywordsAndMaxGradNormAreRefusedByBoth) {
  ASSERT_GE(Paths().size(), 11u);
  for (const auto& [name, info] : Paths()) {
    const Struct& i = info.struct_value();
    for (const char* c : {"typo", "max_grad_norm"}) {
      const Struct& check = i.fields().at(c).struct_value();
      const std::string& verdict = check.fields().at("verdict").string_value();
      SCOPED_TRACE(absl::StrCat(name, " ", c, ": DeepSpeed ", verdict));
      EXPECT_TRUE(absl::StartsWith(verdict, "error: ")) << "DeepSpeed accepted it";
      Loaded l = Load(name, i.fields().at("config").struct_value(),
                      check.fields().at("params").struct_value());
      ASSERT_FALSE(l.config.ok()) << "zerotrain accepted it";
      const std::string key = check.fields().at("params").struct_value().fields().begin()->first;
      EXPECT_TRUE(absl::StrContains(l.config.status().message(), "optimizer.params." + key))
          << l.config.status();
    }
  }
}

// The optimizer section's own keys: those DeepSpeedConfig reads are zerotrain's (proto fields or
// ds_keys.cc's table) and load at DeepSpeed's default; others are warned about, as DeepSpeed
// reads the section as a plain dict and ignores them.
TEST(OptimizerKeysConformance, SectionKeysAreDeepSpeeds) {
  const Struct& section = Oracle().fields().at("section").struct_value();
  const std::set<std::string> theirs = Strings(section.fields().at("keys"));
  EXPECT_TRUE(theirs.count("legacy_fusion")) << absl::StrJoin(theirs, ", ");
  std::set<std::string> ours;
  for (int f = 0; f < OptimizerConfig::descriptor()->field_count(); ++f) {
    ours.insert(OptimizerConfig::descriptor()->field(f)->name());
  }
  for (const DsSection& s : DeepSpeedSections()) {
    if (std::string(s.path) != "optimizer") continue;
    EXPECT_FALSE(s.forbids_extra_keys);
    for (const DsKey& k : s.keys) ours.insert(k.key);
  }
  EXPECT_EQ(ours, theirs);

  const Struct& adam = Paths().at("adam").struct_value().fields().at("config").struct_value();
  const auto load_section = [&](const std::string& key, const Value& v) {
    Struct root = adam;
    (*(*root.mutable_fields())["optimizer"].mutable_struct_value()->mutable_fields())[key] = v;
    return Load("section", root, Struct());
  };
  Loaded d = load_section("legacy_fusion", section.fields().at("legacy_fusion"));
  EXPECT_TRUE(d.config.ok()) << d.config.status();
  EXPECT_TRUE(d.warnings.empty()) << absl::StrJoin(d.warnings, "; ");
  Value on;
  on.set_bool_value(!section.fields().at("legacy_fusion").bool_value());
  Loaded refused = load_section("legacy_fusion", on);
  ASSERT_FALSE(refused.config.ok());
  EXPECT_TRUE(absl::StrContains(refused.config.status().message(), "optimizer.legacy_fusion = "))
      << refused.config.status();
  Loaded typo = load_section("legacy_fusio", on);
  ASSERT_TRUE(typo.config.ok()) << typo.config.status();
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(typo.warnings, "\n"), "optimizer.legacy_fusio"))
      << absl::StrJoin(typo.warnings, "\n");
}

}  // namespace
}  // namespace zerotrain::trainer
