// Shard files: a table of named 1-D arrays (fp32 or raw bytes) behind a checksummed header, each
// array's bytes checksummed per fixed-size chunk so a reader can verify just the ranges it reads
// (a rank loading its slice of a resharded checkpoint, the consolidation tool streaming one
// parameter). Format 2 also records whose file it is (ShardIdentity), so a file copied into
// the wrong tag or rank's name is recognised. Layout, all integers little-endian
// (docs/CHECKPOINT.md):
//   "ZTSHARD1"  u32 format_version  u32 chunk_bytes  u64 table_bytes  u32 crc32c(header + table)
//   table: format 2 only, first: the identity  u64 run_id, i64 step, i32 rank, i32 world_size,
//            i32 stage, u32 tag_len, tag
//          then per array  u32 name_len, name, u8 dtype, u64 numel, u32 crc32c per chunk
//   data: the arrays end to end, in table order, no padding.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/shard_identity.h"

namespace zerotrain::checkpoint {

inline constexpr uint32_t kShardFormatVersion = 2;
inline constexpr uint32_t kDefaultChunkBytes = 1 << 20;
inline constexpr char kShardMagic[8] = {'Z', 'T', 'S', 'H', 'A', 'R', 'D', '1'};
inline constexpr int64_t kShardHeaderBytes = 28;  // magic, version, chunk_bytes, table_bytes, crc
inline constexpr int64_t kMaxArrayNameBytes = 4096;
inline int64_t ShardChunks(int64_t bytes, int64_t chunk_bytes) {
  return (bytes + chunk_bytes - 1) / chunk_bytes;
}

enum class ArrayDType : uint8_t { kFloat32 = 1, kBytes = 2 };
int ArrayDTypeSize(ArrayDType dtype);

struct WrittenFile {
  std::string path;
  int64_t size = 0;
  uint32_t crc32c = 0;  // of the whole file
};

// The name, type and length of one array, known before its contents.
struct ArraySpec {
  std::string name;
  ArrayDType dtype = ArrayDType::kFloat32;
  int64_t numel = 0;
};

// Writes a shard file as its arrays' contents arrive: each array front to back, the arrays in
// any interleaving (an optimizer state read one sub-group at a time hands over a piece of every
// array at once). Each piece goes to its place in the file when it arrives and the table of
// chunk checksums, which comes before the data, is written last, so no array is ever held whole;
// the file's CRC32C is assembled from the chunks' (Crc32cConcat), without reading it back.
class ShardStreamWriter {
 public:
  // Creates the file's temporary (crash-safe, checkpoint/atomic_file.h). Without an identity
  // the file is format 1. Names must be unique, non-empty and at most kMaxArrayNameBytes.
  static absl::StatusOr<ShardStreamWriter> Open(const std::string& path,
                                                std::vector<ArraySpec> arrays,
                                                std::optional<ShardIdentity> identity,
                                                uint32_t chunk_bytes = kDefaultChunkBytes);
  ShardStreamWriter(ShardStreamWriter&&) = default;
  ShardStreamWriter& operator=(ShardStreamWriter&&) = delete;

  // The next `numel` elements of array `index` (as Open listed them); more than the array holds
  // is InvalidArgument.
  absl::Status Append(int index, const void* data, int64_t numel);
  // Every array complete (else FailedPrecondition naming the first short one): the header and
  // table, fsync, the rename. Until then the destructor removes the temporary.
  absl::StatusOr<WrittenFile> Commit();

 private:
  struct Progress {
    ArraySpec spec;
    int64_t file_offset = 0;  // where the array's data starts
    int64_t bytes = 0;
    int64_t written = 0;
    uint32_t open_chunk_crc = 0;  // of the bytes written into the chunk not yet complete
    std::vector<uint32_t> chunk_crcs;
  };
  ShardStreamWriter(AtomicFileWriter file, std::vector<Progress> arrays,
                    std::optional<ShardIdentity> identity, uint32_t chunk_bytes)
      : file_(std::move(file)),
        arrays_(std::move(arrays)),
        identity_(std::move(identity)),
        chunk_bytes_(chunk_bytes) {}
  // Header and table as they will be once the chunk checksums are known (their size is fixed).
  std::string HeaderAndTable() const;

  AtomicFileWriter file_;
  std::vector<Progress> arrays_;
  std::optional<ShardIdentity> identity_;
  uint32_t chunk_bytes_;
};

// The whole-array form: arrays held in memory, added by pointer, written in one call.
class ShardFileWriter {
 public:
  explicit ShardFileWriter(uint32_t chunk_bytes = kDefaultChunkBytes) : chunk_bytes_(chunk_bytes) {}
  // `data` must stay valid until Write; names must be unique.
  absl::Status Add(const std::string& name, ArrayDType dtype, const void* data, int64_t numel);
  // Without an identity the file is written in format 1 (as before identities existed).
  void set_identity(const ShardIdentity& identity) { identity_ = identity; }
  // Writes crash-safely (checkpoint/atomic_file.h).
  absl::StatusOr<WrittenFile> Write(const std::string& path) const;

 private:
  uint32_t chunk_bytes_;
  std::optional<ShardIdentity> identity_;
  std::vector<ArraySpec> specs_;
  std::vector<const void*> data_;  // specs_[i]'s contents
};

struct ArrayInfo {
  std::string name;
  ArrayDType dtype = ArrayDType::kFloat32;
  int64_t numel = 0;
  int64_t data_offset = 0;  // in the file
  std::vector<uint32_t> chunk_crcs;
};

class ShardFileReader {
 public:
  // Validates the magic, version, header checksum, table and that the file's size is exactly
  // what the table describes (a truncated or extended file fails here).
  static absl::StatusOr<ShardFileReader> Open(const std::string& path);
  ShardFileReader(ShardFileReader&& other) noexcept;
  ShardFileReader& operator=(ShardFileReader&&) = delete;
  ~ShardFileReader();

  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }
  const std::vector<ArrayInfo>& arrays() const { return arrays_; }
  const ArrayInfo* Find(const std::string& name) const;  // null when absent
  // What a format 2 file records; empty for format 1.
  const std::optional<ShardIdentity>& identity() const { return identity_; }

  // Elements [offset, offset + numel) of array `name` into `out`, verifying every chunk touched.
  // Not thread-safe (it keeps the last verified chunk): one reader per thread.
  absl::Status ReadRange(const std::string& name, int64_t offset, int64_t numel, void* out) const;
  absl::StatusOr<std::vector<uint8_t>> ReadAllBytes(const std::string& name) const;

 private:
  ShardFileReader() = default;
  // The array entries, from `pos` of the table (after the identity in format 2).
  absl::Status ParseTable(const std::string& table, int64_t pos);

  std::string path_;
  int fd_ = -1;
  int64_t file_size_ = 0;
  uint32_t chunk_bytes_ = 0;
  std::optional<ShardIdentity> identity_;
  std::vector<ArrayInfo> arrays_;
  std::map<std::string, int> index_;
  // The last chunk read and verified: a resharding load reads many small neighbouring ranges.
  mutable std::vector<char> chunk_;
  mutable int64_t chunk_file_offset_ = -1;
};

}  // namespace zerotrain::checkpoint
