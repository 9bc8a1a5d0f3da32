// The zero_optimization section's keys as DeepSpeed 0.19.8's config model has them: every key it
// accepts is read into TrainerConfigProto, refused with a line naming it, or accepted because it
// cannot change what zerotrain computes (docs/CONFIG.md, "zero_optimization keys"); any other
// key is an error, as DeepSpeed's model forbids extra keys.
#pragma once

#include <google/protobuf/struct.pb.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zerotrain::trainer {

// Runs on the JSON tree after the deprecated spellings are rewritten: renames DeepSpeed's field
// names of the stage-3 keys (prefetch_bucket_size, ...) to their stage3_ aliases, which the proto
// uses; drops the keys that cannot matter; fails on unsupported values and unknown keys.
absl::Status ResolveZeroKeys(const std::string& file, google::protobuf::Struct* root);

// The keys of DeepSpeed's zero_optimization model that the proto does not have, for the tests
// and docs: each with what zerotrain does with it.
struct DeepSpeedOnlyZeroKey {
  const char* key;
  const char* default_json;  // DeepSpeed's default, as JSON; "" = any value is accepted
  const char* why;
};
const std::vector<DeepSpeedOnlyZeroKey>& DeepSpeedOnlyZeroKeys();

}  // namespace zerotrain::trainer
