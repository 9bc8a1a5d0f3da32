// run.keep_last_checkpoints: after a save, the checkpoint directory keeps only the newest tags.
// Only zerotrain checkpoint tags are candidates (a subdirectory whose manifest reads and names
// it), never the tag `latest` names; anything else in the directory is left alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::checkpoint {

// Rank 0, after `latest` was updated. Keeps the tag `<dir>/latest` names and the newest other
// tags (by their manifest's write time, the commit order, then by step) up to `keep_last` tags in
// all, and removes the rest: each loses its manifest first, durably, so that a crash mid-removal
// leaves a directory nothing loads. keep_last <= 0 keeps everything. Returns the removed tags.
absl::StatusOr<std::vector<std::string>> PruneTags(const std::string& dir, int64_t keep_last);

}  // namespace zerotrain::checkpoint
