// A checkpoint the Engine saved, read without an Engine: what a program decides before it builds
// one (is there a checkpoint to resume, is it of this model, how far did it get, with which batch
// layout), and the fp32 values of its parameters by name, for sampling from or exporting a
// checkpoint in one process as //checkpoint:consolidate reads it. The manifest's format stays
// checkpoint/'s and the engine's business.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace zerotrain::engine {

struct SavedParameter {
  std::string name;
  int64_t numel = 0;
};

struct SavedCheckpoint {
  std::string tag_dir;                 // <dir>/<tag>
  std::vector<SavedParameter> params;  // in the engine's order
  std::map<std::string, std::string> client_state;
  int64_t optimizer_steps = 0;
  // The batch layout the engine saved with; 0 where the checkpoint does not record it.
  int64_t train_batch_size = 0;
  int64_t gradient_accumulation_steps = 0;
};

// Whether `dir` holds a checkpoint: a `latest` file naming its newest tag.
bool HasCheckpoint(const std::string& dir);

// The checkpoint `latest` names under `dir`, after the checks a load makes before reading any
// state: the manifest, and every rank's file present, of this save and of its recorded size. Each
// problem is one error naming the file.
absl::StatusOr<SavedCheckpoint> ReadSavedCheckpoint(const std::string& dir);

// Every parameter of `model` from the checkpoint's fp32 master values, matched by name, after
// each file's checksum is verified. A checkpoint that does not fit the model (a name missing on
// either side, another size) is one InvalidArgument listing every difference; nothing is copied
// then.
absl::Status LoadSavedParameters(const std::string& dir, torch::nn::Module& model);

}  // namespace zerotrain::engine
