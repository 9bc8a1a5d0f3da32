// The identity record of a format 2 shard file (shard_identity.h); the table layout is in
// shard_file.h.
#include "checkpoint/shard_identity.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/little_endian.h"

namespace zerotrain::checkpoint {
namespace {

constexpr int64_t kFixedBytes = 8 + 8 + 4 + 4 + 4 + 4;  // run id, step, rank, world, stage, len
constexpr int64_t kMaxTagBytes = 4096;

}  // namespace

bool operator==(const ShardIdentity& a, const ShardIdentity& b) {
  return a.run_id == b.run_id && a.tag == b.tag && a.step == b.step && a.rank == b.rank &&
         a.world_size == b.world_size && a.stage == b.stage;
}

std::string IdentityText(const ShardIdentity& id) {
  return absl::StrFormat("rank %d of run 0x%016x step %d (tag %s, world size %d, stage %d)",
                         id.rank, id.run_id, id.step, id.tag, id.world_size, id.stage);
}

void EncodeIdentity(const ShardIdentity& id, std::string* out) {
  PutLittleEndian(out, id.run_id, 8);
  PutLittleEndian(out, static_cast<uint64_t>(id.step), 8);
  PutLittleEndian(out, static_cast<uint32_t>(id.rank), 4);
  PutLittleEndian(out, static_cast<uint32_t>(id.world_size), 4);
  PutLittleEndian(out, static_cast<uint32_t>(id.stage), 4);
  PutLittleEndian(out, id.tag.size(), 4);
  *out += id.tag;
}

absl::StatusOr<ShardIdentity> DecodeIdentity(const std::string& table, int64_t* pos) {
  const int64_t size = static_cast<int64_t>(table.size());
  if (size - *pos < kFixedBytes) return absl::DataLossError("identity record cut short");
  const char* p = table.data() + *pos;
  ShardIdentity id;
  id.run_id = GetLittleEndian(p, 8);
  id.step = static_cast<int64_t>(GetLittleEndian(p + 8, 8));
  id.rank = static_cast<int32_t>(GetLittleEndian(p + 16, 4));
  id.world_size = static_cast<int32_t>(GetLittleEndian(p + 20, 4));
  id.stage = static_cast<int32_t>(GetLittleEndian(p + 24, 4));
  const int64_t tag_len = static_cast<int64_t>(GetLittleEndian(p + 28, 4));
  if (tag_len > kMaxTagBytes || size - *pos - kFixedBytes < tag_len) {
    return absl::DataLossError(
        absl::StrCat("identity record: tag of ", tag_len, " bytes cut short"));
  }
  id.tag = table.substr(*pos + kFixedBytes, tag_len);
  *pos += kFixedBytes + tag_len;
  return id;
}

}  // namespace zerotrain::checkpoint
