// Loading the trainer's configuration: --config=run.pbtxt (protobuf text), --ds_config=ds.json
// (DeepSpeed JSON), both, or neither (trainer/configs/default.pbtxt, compiled into the binary).
// The result is a TrainerConfigProto with every "auto" resolved; ValidateConfig
// (config_validate.h) turns it into the options each module takes. docs/CONFIG.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/config/config.pb.h"

namespace zerotrain::trainer {

struct ConfigSources {
  std::string pbtxt_path;    // --config
  std::string ds_json_path;  // --ds_config; with ds_json_text set, the name its errors give
  // The DeepSpeed JSON itself, when it is no file (python/: a dict the script passed).
  std::optional<std::string> ds_json_text = std::nullopt;
};

// Reads and merges the sources. With both, the JSON gives the DeepSpeed sections and the pbtxt
// the rest; a field set in both files is an error naming the field, both files and both values.
// Warnings (unknown JSON keys, deprecated spellings) are appended to `warnings`.
absl::StatusOr<TrainerConfigProto> LoadConfigProto(const ConfigSources& sources,
                                                   std::vector<std::string>* warnings);

// Protobuf text → proto; errors carry `file`:line:column. Unknown fields are errors: the pbtxt
// is zerotrain's own format, where a misspelt key is a mistake rather than another tool's key.
absl::StatusOr<TrainerConfigProto> ParsePbtxt(const std::string& text, const std::string& file);

// DeepSpeed's DEEPSPEED_TIMEOUT (whole minutes; `value` is the variable's text, nullptr when unset)
// becomes run.comm_timeout_s when the config leaves that field unset; the config wins otherwise.
// A value that is not a whole number of minutes in [1, 1440] is InvalidArgument naming the
// variable and its value.
absl::Status ApplyDeepSpeedTimeout(const char* value, TrainerConfigProto* config);

// The built-in trainer/configs/default.pbtxt.
std::string DefaultConfigPbtxt();

// Resolves the fields a JSON file wrote as "auto" (dotted paths) in `config`, which already holds
// everything else: batch sizes stay unset (derived by ResolveBatchSizes), bucket sizes follow
// model.n_embd as DeepSpeed's Hugging Face integration does, scheduler totals and peaks follow
// run.steps and the optimizer's lr, and what that integration takes from the Trainer's arguments
// (fp16/bf16.enabled, the optimizer's lr, betas, eps and weight_decay, gradient_clipping,
// warmup_num_steps) gets those arguments' defaults. A field `config` already sets (from the
// pbtxt) keeps that value; an "auto" the integration does not fill in is an error naming it.
absl::Status ResolveAutoFields(const std::vector<std::string>& auto_fields, const std::string& file,
                               TrainerConfigProto* config);

// Sets every unset field that has a declared default to it, and creates a section only if it
// then holds something: the effective configuration, explicit.
void FillDefaults(google::protobuf::Message* config);

// A set field's value as protobuf text writes it; a repeated one as "[a, b]".
std::string FieldText(const google::protobuf::Message& m,
                      const google::protobuf::FieldDescriptor* fd);

// The configuration with defaults filled in, as protobuf text (for --print_config). Give it
// TrainerConfig::effective to include what ValidateConfig derived (batch triple, model sizes).
std::string PrintConfig(const TrainerConfigProto& config);

}  // namespace zerotrain::trainer
