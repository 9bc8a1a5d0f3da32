// zero_optimization's keys (ds_zero_keys.h), from deepspeed/runtime/zero/config.py (0.19.8).
#include "trainer/config/ds_zero_keys.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/config/config.pb.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

std::string Json(const Value& v) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

}  // namespace

const std::vector<DeepSpeedOnlyZeroKey>& DeepSpeedOnlyZeroKeys() {
  // A key with a default is accepted at that value (a written-out DeepSpeed config) and refused
  // at any other, which would ask for behaviour zerotrain does not have.
  static const std::vector<DeepSpeedOnlyZeroKey> keys = {
      {"use_multi_rank_bucket_allreduce", "",
       "how DeepSpeed groups its all-reduce buckets; the reduced values are the same"},
      {"compute_grad_norm", "true", "zerotrain computes the norm whenever a step needs it"},
      {"zenflow", "null", "ZenFlow's asynchronous offloaded updates"},
      {"module_granularity_threshold", "0", "stage 3's leaf-module grouping"},
      {"use_all_reduce_for_fetch_params", "false", "stage 3 fetching parameters by all-reduce"},
      {"allgather_sequential", "false", "stage 3's one-parameter-at-a-time all-gather"},
      {"legacy_stage1", "false", "DeepSpeed's old stage 1 implementation"},
      {"parameter_alignment", "false", "padding each parameter to an alignment"},
      {"zero_quantized_nontrainable_weights", "false", "ZeRO++ quantized frozen weights"},
      {"pipeline_loading_checkpoint", "false", "pipeline-parallel checkpoint loading"},
      {"override_module_apply", "",
       "zero.Init's patch of Python's Module.apply; there is no Python module to patch"},
      {"log_trace_cache_warnings", "", "a logging switch of DeepSpeed's stage 3 trace cache"},
      {"enable_sanity_checks", "", "DeepSpeed's own debug assertions"},
      {"save_muon_momentum_buffer_in_memory", "false", "the Muon optimizer's buffers"},
      {"leaf_module", "", "Python class names for stage 3 leaf modules; none exist in C++"},
  };
  return keys;
}

absl::Status ResolveZeroKeys(const std::string& file, Struct* root) {
  auto it = root->mutable_fields()->find("zero_optimization");
  if (it == root->mutable_fields()->end() || !it->second.has_struct_value()) {
    return absl::OkStatus();  // absent, or a type error the walk reports
  }
  auto& z = *it->second.mutable_struct_value()->mutable_fields();
  const std::string where = absl::StrCat(file, ": zero_optimization.");
  // DeepSpeed's field names of the stage-3 keys; the stage3_ spellings are their aliases.
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
  for (const DeepSpeedOnlyZeroKey& k : DeepSpeedOnlyZeroKeys()) {
    // The stage-3 ones also have stage3_ aliases.
    auto key = z.find(k.key);
    if (key == z.end()) key = z.find(absl::StrCat("stage3_", k.key));
    if (key == z.end()) continue;
    const std::string value = Json(key->second);
    if (*k.default_json != '\0' && value != k.default_json && value != "null") {
      return absl::UnimplementedError(
          absl::StrCat(where, k.key, " = ", value, ": not supported by zerotrain (", k.why,
                       "); remove it or set DeepSpeed's default ", k.default_json));
    }
    z.erase(key);
  }
  std::vector<std::string> unknown;
  for (const auto& [key, unused] : z) {
    if (d->FindFieldByName(key) == nullptr) unknown.push_back(key);
  }
  if (unknown.empty()) return absl::OkStatus();
  std::sort(unknown.begin(), unknown.end());
  return absl::InvalidArgumentError(absl::StrCat(
      where, absl::StrJoin(unknown, ", zero_optimization."),
      ": unknown key (DeepSpeed 0.19.8 rejects it too: its zero_optimization model forbids "
      "extra keys; docs/CONFIG.md lists the keys)"));
}

}  // namespace zerotrain::trainer
