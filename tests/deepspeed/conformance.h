// What the conformance tests share besides running the oracle: zerotrain's side of a case (a
// ds_config file through the trainer's own loading and validation, as --ds_config reads it) and
// the oracle's JSON output parsed with protobuf's JSON reader into google.protobuf.Value.
#pragma once

#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/config/config_validate.h"

namespace zerotrain::testing {

// `path` as `--ds_config=path` with `world_size` ranks; `steps` > 0 sets run.steps (what
// total_num_steps defaults to). Warnings (unknown keys and such) go to `warnings` when given.
absl::StatusOr<trainer::TrainerConfig> LoadDsConfig(const std::string& path, int world_size,
                                                    int64_t steps = 0,
                                                    std::vector<std::string>* warnings = nullptr);

// Parses JSON text (an object, as the oracle prints) into a Struct; an error quotes the start.
absl::StatusOr<google::protobuf::Struct> ParseJsonObject(const std::string& text);

// A list of numbers; an element that is a list of numbers becomes one row.
std::vector<double> Numbers(const google::protobuf::Value& list);
std::vector<std::vector<double>> Rows(const google::protobuf::Value& list);

}  // namespace zerotrain::testing
