// DeepSpeed 0.19.8's keys per section (ds_keys.h), from deepspeed/runtime/config.py and the config
// models and dict readers it calls: zero/config.py, zero/offload_config.py, precision_config.py,
// monitor/config.py, comm/config.py, activation_checkpointing/config.py,
// swap_tensor/aio_config.py, model_checkpointing/config.py, profiling/config.py; the optimizer
// section's own keys (its params: config_optimizer.cc).
#include "trainer/config/ds_keys.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "trainer/config/config.pb.h"
#include "trainer/config/field_names.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;
using H = DsKeyHandling;

// The pydantic monitors zerotrain does not implement: their keys are read only when the monitor
// is on, which is refused, but DeepSpeed's model still rejects a misspelt one.
constexpr char kMonitorOff[] = "read only when the monitor is on, which zerotrain refuses";

std::vector<DsSection> Sections() {
  return {
      {"zero_optimization.offload_optimizer",
       OffloadOptimizerConfig::descriptor(),
       true,
       {
           {"super_offload", "", H::kDefaultOnly, "false", "SuperOffload's CPU optimizer step"},
           {"cpuadam_cores_perc", "", H::kNoEffect, "",
            "the share of CPU cores DeepSpeed's CPU Adam uses"},
       }},
      {"zero_optimization.offload_param", OffloadParamConfig::descriptor(), true, {}},
      {"zero_optimization",
       ZeroOptimizationConfig::descriptor(),
       true,
       {
           {"use_multi_rank_bucket_allreduce", "", H::kNoEffect, "",
            "how DeepSpeed groups its all-reduce buckets; the reduced values are the same"},
           {"compute_grad_norm", "", H::kDefaultOnly, "true",
            "zerotrain computes the norm whenever a step needs it"},
           {"zenflow", "", H::kDefaultOnly, "null", "ZenFlow's asynchronous offloaded updates"},
           {"module_granularity_threshold", "stage3_module_granularity_threshold", H::kDefaultOnly,
            "0", "stage 3's leaf-module grouping"},
           {"use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params",
            H::kDefaultOnly, "false", "stage 3 fetching parameters by all-reduce"},
           {"allgather_sequential", "stage3_allgather_sequential", H::kDefaultOnly, "false",
            "stage 3's one-parameter-at-a-time all-gather"},
           {"legacy_stage1", "", H::kDefaultOnly, "false",
            "DeepSpeed's old stage 1 implementation"},
           {"parameter_alignment", "", H::kDefaultOnly, "false",
            "padding each parameter to an alignment"},
           {"zero_quantized_nontrainable_weights", "", H::kDefaultOnly, "false",
            "ZeRO++ quantized frozen weights"},
           {"pipeline_loading_checkpoint", "", H::kDefaultOnly, "false",
            "pipeline-parallel checkpoint loading"},
           {"override_module_apply", "", H::kNoEffect, "",
            "zero.Init's patch of Python's Module.apply; there is no Python module to patch"},
           {"log_trace_cache_warnings", "", H::kNoEffect, "",
            "a logging switch of DeepSpeed's stage 3 trace cache"},
           {"enable_sanity_checks", "", H::kNoEffect, "", "DeepSpeed's own debug assertions"},
           {"save_muon_momentum_buffer_in_memory", "", H::kDefaultOnly, "false",
            "the Muon optimizer's buffers"},
           {"leaf_module", "", H::kNoEffect, "",
            "Python class names for stage 3 leaf modules; none exist in C++"},
           {"mics_shard_size", "", H::kRemoved, "", "MiCS"},
           {"mics_hierarchical_params_gather", "", H::kRemoved, "", "MiCS"},
           {"zeropp_loco_param", "", H::kRemoved, "", "LoCo-ZeRO++"},
       }},
      {"fp16", Fp16Config::descriptor(), true, {}},
      {"bf16",
       Bf16Config::descriptor(),
       true,
       {
           {"immediate_grad_update", "", H::kDefaultOnly, "false",
            "folding each micro-batch's bf16 gradients into the fp32 ones during backward"},
       }},
      {"tensorboard", MonitorConfig::descriptor(), true, {}},
      {"csv_monitor", MonitorConfig::descriptor(), true, {}},
      {"wandb",
       nullptr,
       true,
       {
           {"enabled", "", H::kNoEffect, "", kMonitorOff},
           {"group", "", H::kNoEffect, "", kMonitorOff},
           {"team", "", H::kNoEffect, "", kMonitorOff},
           {"project", "", H::kNoEffect, "", kMonitorOff},
       }},
      {"comet",
       nullptr,
       true,
       {
           {"enabled", "", H::kNoEffect, "", kMonitorOff},
           {"samples_log_interval", "", H::kNoEffect, "", kMonitorOff},
           {"project", "", H::kNoEffect, "", kMonitorOff},
           {"workspace", "", H::kNoEffect, "", kMonitorOff},
           {"api_key", "", H::kNoEffect, "", kMonitorOff},
           {"experiment_name", "", H::kNoEffect, "", kMonitorOff},
           {"experiment_key", "", H::kNoEffect, "", kMonitorOff},
           {"online", "", H::kNoEffect, "", kMonitorOff},
           {"mode", "", H::kNoEffect, "", kMonitorOff},
       }},
      {"comms_logger", CommsLoggerConfig::descriptor(), true, {}},
      {"activation_checkpointing", ActivationCheckpointingConfig::descriptor(), false, {}},
      {"aio",
       AioConfig::descriptor(),
       false,
       {
           {"use_gds", "", H::kDefaultOnly, "false", "GPUDirect Storage"},
       }},
      {"checkpoint.parallel_write", ParallelWriteConfig::descriptor(), false, {}},
      {"checkpoint.writer",
       nullptr,
       false,
       {
           {"type", "", H::kNoEffect, "", "DeepSpeed's checkpoint writer"},
           {"io_buffer_size", "", H::kNoEffect, "", "DeepSpeed's checkpoint writer"},
           {"io_buffer_double", "", H::kNoEffect, "", "DeepSpeed's checkpoint writer"},
           {"show_statistics", "", H::kNoEffect, "", "DeepSpeed's checkpoint writer"},
           {"data_parallel", "", H::kNoEffect, "", "DeepSpeed's checkpoint writer"},
           {"decoupled", "", H::kNoEffect, "", "DeepSpeed's checkpoint writer"},
           {"io_multiplier", "", H::kNoEffect, "", "DeepSpeed's checkpoint writer"},
       }},
      {"checkpoint",
       CheckpointConfig::descriptor(),
       false,
       {
           {"checkpoint_serialization", "", H::kNoEffect, "",
            "torch.save's zipfile switch; zerotrain writes its own checkpoint files"},
           {"writer", "", H::kSection, "",
            "how DeepSpeed's writer does its file I/O; zerotrain writes its own checkpoint files"},
       }},
      {"flops_profiler",
       nullptr,
       false,
       {
           {"enabled", "", H::kNoEffect, "", "read only when the profiler is on"},
           {"recompute_fwd_factor", "", H::kNoEffect, "", "read only when the profiler is on"},
           {"profile_step", "", H::kNoEffect, "", "read only when the profiler is on"},
           {"module_depth", "", H::kNoEffect, "", "read only when the profiler is on"},
           {"top_modules", "", H::kNoEffect, "", "read only when the profiler is on"},
           {"detailed", "", H::kNoEffect, "", "read only when the profiler is on"},
           {"output_file", "", H::kNoEffect, "", "read only when the profiler is on"},
       }},
      {"torch_autocast",
       nullptr,
       false,
       {
           {"enabled", "", H::kNoEffect, "", "read only when autocast is on"},
           {"dtype", "", H::kNoEffect, "", "read only when autocast is on"},
           {"lower_precision_safe_modules", "", H::kNoEffect, "", "read only when autocast is on"},
       }},
      {"data_types",
       nullptr,
       false,
       {
           {"grad_accum_dtype", "", H::kDefaultOnly, "null",
            "accumulating gradients in a dtype of one's choice"},
           {"param_dtype", "", H::kDefaultOnly, "null", "a parameter dtype of one's choice"},
           {"buffer_dtype", "", H::kDefaultOnly, "null", "a buffer dtype of one's choice"},
           {"keep_in_fp32_modules", "", H::kDefaultOnly, "\"auto\"",
            "modules kept in fp32 by name"},
       }},
      {"optimizer",
       OptimizerConfig::descriptor(),
       false,
       {
           {"legacy_fusion", "", H::kDefaultOnly, "false",
            "the legacy fused-Adam step of DeepSpeed's stage-0 fp16 optimizer, which 0.19.8's "
            "FusedAdam refuses"},
       }},
      {"",
       TrainerConfigProto::descriptor(),
       false,
       {
           {"memory_breakdown", "", H::kNoEffect, "", "DeepSpeed's memory-usage log lines"},
           {"dump_state", "", H::kNoEffect, "",
            "prints DeepSpeed's engine state at start-up (--print_config prints zerotrain's)"},
           {"disable_python_gc", "", H::kNoEffect, "", "Python's garbage collector"},
           {"log_level", "", H::kNoEffect, "", "the level of DeepSpeed's Python logger"},
           {"vocabulary_size", "", H::kNoEffect, "",
            "DeepSpeed only warns when it is not a multiple of 8"},
           {"timers", "", H::kNoEffect, "", "DeepSpeed's throughput timer"},
           {"disable_allgather", "", H::kNoEffect, "", "read by DeepSpeed 0.19.8 and used nowhere"},
           {"dataloader_drop_last", "", H::kNoEffect, "",
            "the DataLoader deepspeed.initialize builds from training_data; zerotrain's data "
            "section has its own sampler"},
           {"seq_parallel_communication_data_type", "", H::kNoEffect, "",
            "sequence parallelism, which zerotrain does not have"},
           {"use_data_before_expert_parallelism", "", H::kNoEffect, "",
            "the process-group order of expert parallelism, which zerotrain does not have"},
           {"managed_gradient_accumulation", "", H::kDefaultOnly, "true",
            "the caller owning the accumulation boundary"},
           {"gradient_allreduce_op", "", H::kDefaultOnly, "\"mean\"",
            "summing instead of averaging gradients"},
           {"communication_data_type", "", H::kDefaultOnly, "null",
            "a separate dtype for gradient communication"},
           {"sequence_parallel_size", "", H::kDefaultOnly, "1", "Ulysses sequence parallelism"},
           {"pipeline", "", H::kFeature, "", "pipeline parallelism"},
           {"flops_profiler", "", H::kFeature, "enabled", "the FLOPS profiler"},
           {"autotuning", "", H::kFeature, "enabled", "autotuning"},
           {"data_efficiency", "", H::kFeature, "enabled", "data efficiency"},
           {"hybrid_engine", "", H::kFeature, "enabled", "the hybrid engine"},
           {"wandb", "", H::kFeature, "enabled", "the Weights & Biases monitor"},
           {"comet", "", H::kFeature, "enabled", "the Comet monitor"},
           {"torch_autocast", "", H::kFeature, "enabled", "torch.autocast (use bf16 or fp16)"},
           {"compile", "", H::kFeature, "deepcompile", "DeepCompile"},
           {"tensor_parallel", "", H::kFeature, "autotp_size", "tensor parallelism"},
           {"expert_parallel", "", H::kFeature, "enabled", "expert parallelism"},
           {"weight_quantization", "", H::kFeature, "", "weight quantization"},
           {"datastates_ckpt", "", H::kFeature, "", "DataStates asynchronous checkpointing"},
           {"data_types", "", H::kSection, "", "dtypes of one's choice"},
           {"nebula", "", H::kRemoved, "", "Nebula checkpointing"},
           {"compression_training", "", H::kRemoved, "", "the compression library"},
           {"amp", "", H::kRemoved, "", "NVIDIA Apex AMP (use bf16 or fp16)"},
           {"quantize_training", "", H::kRemoved, "", "Mixture-of-Quantization"},
           {"sparse_gradients", "", H::kRemoved, "", "sparse embedding gradients"},
           {"eigenvalue", "", H::kRemoved, "", "eigenvalue-based Mixture-of-Quantization"},
           {"sparse_attention", "", H::kRemoved, "", "sparse attention"},
           {"elasticity", "", H::kRemoved, "", "elastic training"},
           {"graph_harvesting", "", H::kRemoved, "", "graph harvesting"},
           {"curriculum_learning", "", H::kRemoved, "",
            "top-level curriculum_learning (it lives under data_efficiency)"},
           {"progressive_layer_drop", "", H::kRemoved, "", "progressive layer drop"},
       }},
  };
}

Struct* FindSection(Struct* root, const std::string& path) {
  if (path.empty()) return root;
  Struct* s = root;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    auto it = s->mutable_fields()->find(std::string(part));
    if (it == s->mutable_fields()->end() || !it->second.has_struct_value()) return nullptr;
    s = it->second.mutable_struct_value();
  }
  return s;
}

bool IsOn(const Value& v) {
  if (v.has_null_value()) return false;
  if (v.has_bool_value()) return v.bool_value();
  if (v.has_number_value()) return v.number_value() != 0;
  if (v.has_string_value()) return !v.string_value().empty();
  return true;
}

// Whether a kFeature key's value asks for the feature: true, a string or number that selects
// something, or an object whose `on_key` is on ("": "enabled" if present, else non-empty).
bool TurnsOn(const Value& v, const std::string& on_key) {
  if (!v.has_struct_value()) return IsOn(v);
  const auto& fields = v.struct_value().fields();
  auto it = fields.find(on_key.empty() ? "enabled" : on_key);
  if (it != fields.end()) return IsOn(it->second);
  return on_key.empty() && !fields.empty();
}

// DeepSpeed's field names of the stage-3 keys; the stage3_ spellings, which the proto uses, are
// their aliases.
absl::Status RenameStage3Keys(const std::string& where, Struct* zero) {
  auto& z = *zero->mutable_fields();
  const google::protobuf::Descriptor* d = ZeroOptimizationConfig::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string& alias = d->field(i)->name();
    if (!absl::StartsWith(alias, "stage3_")) continue;
    const std::string name = alias.substr(7);
    auto short_it = z.find(name);
    if (short_it == z.end()) continue;
    if (z.count(alias)) {
      return absl::InvalidArgumentError(absl::StrCat(where, name, " and zero_optimization.", alias,
                                                     " are one setting; set only one"));
    }
    z[alias] = short_it->second;
    z.erase(name);
  }
  return absl::OkStatus();
}

// Checks one table key's value: OK means the key is accepted (and dropped from the tree).
absl::Status CheckKey(const std::string& where, const std::string& key, const DsKey& k,
                      const Value& v) {
  switch (k.handling) {
    case H::kNoEffect:
      return absl::OkStatus();
    case H::kDefaultOnly: {
      const std::string value = JsonText(v);
      if (v.has_null_value() || (v.has_string_value() && v.string_value() == "auto") ||
          absl::AsciiStrToLower(value) == absl::AsciiStrToLower(k.value)) {
        return absl::OkStatus();
      }
      return absl::UnimplementedError(
          absl::StrCat(where, key, " = ", value, ": not supported by zerotrain (", k.why,
                       "); remove it or set DeepSpeed's default ", k.value));
    }
    case H::kFeature:
      if (!TurnsOn(v, k.value)) return absl::OkStatus();
      return absl::UnimplementedError(
          absl::StrCat(where, key, ": ", k.why, " is not implemented in zerotrain"));
    case H::kRemoved:
      return absl::InvalidArgumentError(
          absl::StrCat(where, key, ": ", k.why,
                       " was removed from DeepSpeed, and 0.19.8 refuses the key too; "
                       "remove it"));
    case H::kSection:
      if (v.has_struct_value() || v.has_null_value()) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(where, key, ": expected an object, got ", JsonText(v)));
  }
  return absl::OkStatus();
}

absl::Status ResolveSection(const std::string& file, const DsSection& section, Struct* s,
                            std::vector<std::string>* unknown) {
  const std::string dotted = section.path[0] == '\0' ? "" : absl::StrCat(section.path, ".");
  const std::string where = absl::StrCat(file, ": ", dotted);
  if (std::string(section.path) == "zero_optimization") {
    if (absl::Status st = RenameStage3Keys(where, s); !st.ok()) return st;
  }
  std::vector<std::string> keys, strangers;
  for (const auto& [key, unused] : s->fields()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());  // the map's order is unspecified; messages must not be
  for (const std::string& key : keys) {
    const DsKey* entry = nullptr;
    for (const DsKey& k : section.keys) {
      if (key == k.key || (*k.alias != '\0' && key == k.alias)) entry = &k;
    }
    if (entry != nullptr) {
      if (absl::Status st = CheckKey(where, key, *entry, s->fields().at(key)); !st.ok()) {
        return st;
      }
      // A section without a message is dropped whole by its parent's entry, which may still
      // need to read a key here (a kFeature's "enabled").
      if (section.message != nullptr) s->mutable_fields()->erase(key);
    } else if (section.message == nullptr || section.message->FindFieldByName(key) == nullptr) {
      strangers.push_back(key);
    }
  }
  if (strangers.empty()) return absl::OkStatus();
  std::vector<std::string> known;
  for (const DsKey& k : section.keys) known.push_back(k.key);
  if (section.message != nullptr) {
    for (int i = 0; i < section.message->field_count(); ++i) {
      known.push_back(section.message->field(i)->name());
    }
  }
  for (std::string& key : strangers) key += DidYouMean(known, key);
  if (section.forbids_extra_keys) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, absl::StrJoin(strangers, absl::StrCat(", ", dotted)),
                     ": unknown key (DeepSpeed 0.19.8 rejects it too: its ",
                     section.path[0] == '\0' ? "top-level" : section.path,
                     " model forbids extra keys; docs/CONFIG.md lists the keys)"));
  }
  if (section.message == nullptr) {  // the parent drops the section; the walk never sees it
    for (const std::string& key : strangers) unknown->push_back(dotted + key);
  }
  return absl::OkStatus();
}

}  // namespace

std::string JsonText(const Value& v) {
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(v, &out).ok()) return "?";
  return out;
}

const std::vector<DsSection>& DeepSpeedSections() {
  static const auto* sections = new std::vector<DsSection>(Sections());
  return *sections;
}

absl::Status ResolveDeepSpeedKeys(const std::string& file, Struct* root,
                                  std::vector<std::string>* unknown) {
  // Children come first, so a misspelt key inside a section that is then dropped (a monitor that
  // is off) is still found.
  for (const DsSection& section : DeepSpeedSections()) {
    Struct* s = FindSection(root, section.path);
    if (s == nullptr) continue;  // absent, or not an object: the walk reports the type
    if (absl::Status st = ResolveSection(file, section, s, unknown); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::trainer
