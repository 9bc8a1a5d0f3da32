// ParseDsJson: reads a DeepSpeed ds_config.json into TrainerConfigProto. The JSON is walked once
// against the proto's descriptor before protobuf's JSON parser sees it, so that what DeepSpeed
// accepts is accepted here too: 5e8 in integer fields, "auto", deprecated spellings, and keys we
// do not know (dropped, listed in one warning). The JSON itself must be strict (json/strict_json.h:
// no trailing commas, comments, NaN or duplicate keys). docs/CONFIG.md describes the rules.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/config/config.pb.h"

namespace zerotrain::trainer {

struct DsJson {
  TrainerConfigProto config;
  // Dotted paths of fields written as "auto": left unset in `config`, resolved by the loader
  // once the whole configuration is known (ResolveAutoFields in config_loader.h).
  std::vector<std::string> auto_fields;
  // One line per deprecated key that was rewritten, and one listing every unknown key.
  std::vector<std::string> warnings;
};

// `file` names the source in messages ("ds_config.json: zero_optimization.stage: ...").
absl::StatusOr<DsJson> ParseDsJson(const std::string& json, const std::string& file);

}  // namespace zerotrain::trainer
