// DeepSpeed 0.19.8's ds_config keys, section by section, against TrainerConfigProto: one table
// (DeepSpeedSections) that the JSON reader applies and that docs/CONFIG.md and the conformance
// tests (tests/deepspeed/section_keys_conformance_test.cc) read. A section's keys are its proto
// message's fields plus the table's; every key DeepSpeed reads is implemented (a proto field),
// accepted because it cannot change what zerotrain computes, or refused with a line naming it.
// Any other key is an error where DeepSpeed's pydantic model forbids extra keys, and dropped with
// the reader's one unknown-key warning where DeepSpeed reads a plain dict (and ignores it).
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zerotrain::trainer {

enum class DsKeyHandling {
  kNoEffect,     // accepted whatever its value: it cannot change what zerotrain computes
  kDefaultOnly,  // accepted at DeepSpeed's default (or null, or "auto"); refused otherwise
  kFeature,      // a DeepSpeed feature zerotrain lacks: refused when the value turns it on
  kRemoved,      // refused wherever it appears, as DeepSpeed 0.19.8 refuses it
  kSection,      // an object without a proto message: its own DsSection checks its keys
};

// A key DeepSpeed reads that the section's proto message has no field for.
struct DsKey {
  const char* key;
  const char* alias;  // DeepSpeed's other spelling ("" = none)
  DsKeyHandling handling;
  // kDefaultOnly: DeepSpeed's default as JSON. kFeature: the key of the object that turns the
  // feature on ("" = "enabled" when present, else any non-empty object). Otherwise "".
  const char* value;
  const char* why;  // what the key does in DeepSpeed, and why zerotrain may drop or refuse it
};

struct DsSection {
  const char* path;  // dotted; "" = the top level
  // The section's message in TrainerConfigProto; nullptr for one zerotrain has no message for
  // (its keys are all in `keys`, and the parent's entry for it is kFeature or kSection).
  const google::protobuf::Descriptor* message;
  bool forbids_extra_keys;  // DeepSpeed's config model for it has extra="forbid"
  std::vector<DsKey> keys;
};

// Every section whose keys zerotrain checks, children before their parents.
const std::vector<DsSection>& DeepSpeedSections();

// A JSON value as text, for messages that quote what a file says.
std::string JsonText(const google::protobuf::Value& v);

// Applies the table to a ds_config.json tree after the deprecated spellings are rewritten: renames
// DeepSpeed's field names of the stage-3 keys (prefetch_bucket_size, ...) to the stage3_ aliases
// the proto uses, checks and removes the table's keys, and fails on unknown keys of sections that
// forbid them. Unknown keys of plain-dict sections without a proto message are appended to
// `unknown` as dotted paths; those of the other plain-dict sections are left for the reader's walk.
absl::Status ResolveDeepSpeedKeys(const std::string& file, google::protobuf::Struct* root,
                                  std::vector<std::string>* unknown);

}  // namespace zerotrain::trainer
