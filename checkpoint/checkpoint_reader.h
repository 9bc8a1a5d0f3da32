// A training-state checkpoint on disk, for readers: the tag directory's layout and names, the
// `latest` pointer, and CheckpointReader, which opens a checkpoint from its manifest alone and
// reads any range of the flat fp32 master (or an optimizer state) by flat element index, whatever
// world size and stage wrote it. The engine's LoadCheckpoint and the consolidation tool use it.
//
//   <dir>/latest                       the tag of the newest complete checkpoint (written last)
//   <dir>/<tag>/manifest.ztm           checkpoint/manifest.h (written after every shard file)
//   <dir>/<tag>/rank_<r>.zts           checkpoint/shard_file.h, one per saving rank
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/manifest.pb.h"
#include "checkpoint/shard_file.h"
#include "partition/shard_layout.h"

namespace zerotrain::checkpoint {

inline constexpr char kManifestFileName[] = "manifest.ztm";
inline constexpr char kLatestFileName[] = "latest";
inline constexpr char kMasterArray[] = "master";      // per element, fp32
inline constexpr char kRngArray[] = "cpu_rng_state";  // bytes, per saving rank

std::string DefaultTag(int64_t optimizer_steps);  // "global_step<N>"
std::string ShardFileName(int rank);              // "rank_<r>.zts"
bool IsShardFileName(const std::string& name);    // ShardFileName of some rank
// A tag is one plain directory name: not empty, no '/', not "." / "..", not starting with '.'.
absl::Status ValidateTag(const std::string& tag);
// What is wrong with a manifest's file list, or "" when nothing is: every entry names its rank's
// ShardFileName, no rank is listed twice, and every rank of the layout has a state-holding file.
// The reader refuses such a manifest, and CommitTag refuses to write one.
std::string FileListProblem(const Manifest& manifest);
absl::Status WriteLatest(const std::string& dir, const std::string& tag);  // crash-safe
absl::StatusOr<std::string> ReadLatest(const std::string& dir);

// Which old file and offset hold flat elements: a contiguous run [begin, begin + numel) of the
// flat buffer held by rank `rank` of the layout at `shard_offset` of its shard.
struct FlatRun {
  int rank = 0;
  int64_t begin = 0;
  int64_t numel = 0;
  int64_t shard_offset = 0;
};
std::vector<FlatRun> RunsOf(const partition::ShardLayout& layout, int64_t begin, int64_t numel);

class CheckpointReader {
 public:
  // tag "" = the one `latest` names. Reads and checks the manifest (its tag is the directory's)
  // and that every shard file it lists exists, is the file of that rank of this save (format 2
  // files record run id, tag, step, rank, world size and stage: shard_identity.h) and has the
  // recorded size. Each problem is one DataLoss error naming the file, what it records and what
  // the manifest expects. Shard contents are verified as they are read.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& dir,
                                                                const std::string& tag = "");

  const Manifest& manifest() const { return manifest_; }
  const std::string& tag_dir() const { return tag_dir_; }
  // The layout the per-element arrays follow (1 rank for a stage-0 checkpoint).
  const partition::ShardLayout& layout() const { return *layout_; }
  int num_params() const { return manifest_.params_size(); }
  int64_t param_offset(int i) const { return layout_->param_offset(i); }  // flat index
  int64_t numel() const { return layout_->numel(); }

  // Flat elements [begin, begin + numel) (within padded_numel()) of per-element fp32 array `array`
  // (kMasterArray or one of manifest().state_arrays()) into `out`.
  absl::Status ReadFlat(const std::string& array, int64_t begin, int64_t numel, float* out);
  // Parameter i's fp32 master values, flattened.
  absl::StatusOr<std::vector<float>> ReadParam(int i);
  // Before a caller overwrites anything with the checkpoint: every file holding state has each
  // of `arrays` as fp32 with at least the layout's shard_numel() elements (else DataLoss naming
  // the file and the array). Reads the tables only.
  absl::Status CheckStateArrays(const std::vector<std::string>& arrays) const;
  // A byte array of the file saving rank `rank` wrote (e.g. kRngArray); NotFound when absent.
  absl::StatusOr<std::vector<uint8_t>> ReadRankBytes(int rank, const std::string& array);
  // Reads listed files whole and compares their CRC32C with the manifest's: files part,
  // part + parts, ..., so that `parts` ranks can share the reading. A file that differs is
  // read again chunk by chunk, so that the error names the damaged array and bytes when the
  // chunks' own checksums show them.
  absl::Status VerifyFileChecksums(int part = 0, int parts = 1) const;

 private:
  CheckpointReader() = default;
  absl::StatusOr<const ShardFileReader*> FileOf(int rank) const;

  Manifest manifest_;
  std::string tag_dir_;
  std::unique_ptr<partition::ShardLayout> layout_;
  std::map<int, int> file_of_rank_;  // saving rank -> index into manifest_.files()
  std::map<int, std::unique_ptr<ShardFileReader>> open_;  // saving rank -> its file
};

}  // namespace zerotrain::checkpoint
