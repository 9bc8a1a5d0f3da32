// Which save a shard file belongs to, as format 2 shard files record it in their checksummed
// header: the reader compares it with the manifest, so a valid file in the wrong place (another
// rank's name, an older tag, another run) is an error naming the file rather than wrong weights.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::checkpoint {

struct ShardIdentity {
  uint64_t run_id = 0;  // random per engine start, the same on every rank of one run
  std::string tag;
  int64_t step = 0;  // optimizer steps at the save
  int rank = 0;
  int world_size = 0;
  int stage = 0;
};
bool operator==(const ShardIdentity& a, const ShardIdentity& b);
inline bool operator!=(const ShardIdentity& a, const ShardIdentity& b) { return !(a == b); }

// "rank 1 of run 0x00000000000000ab step 20 (tag global_step20, world size 2, stage 1)"
std::string IdentityText(const ShardIdentity& id);

// Appends the identity record to a shard file's table.
void EncodeIdentity(const ShardIdentity& id, std::string* out);
// Parses the record at `*pos` of `table` and advances `*pos`; the error says what is cut short.
absl::StatusOr<ShardIdentity> DecodeIdentity(const std::string& table, int64_t* pos);

}  // namespace zerotrain::checkpoint
