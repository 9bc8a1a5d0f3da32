// Writing one checkpoint tag, the protocol that keeps `<dir>/latest` on a complete checkpoint
// whatever moment a process dies: rank 0 prepares the tag directory, every rank writes its shard
// file, rank 0 commits the manifest and then `latest` (docs/CHECKPOINT.md, "Crash safety").
// This library owns files, fsyncs, `latest`, stale tags and refusals; the caller says which
// arrays each rank saves and runs the cross-rank agreement between the phases itself, so that
// checkpoint/ needs no process group:
//
//   rank 0: PrepareTag            -> all ranks agree it succeeded
//   every rank: WriteRankFile     -> rank 0 learns every rank's RankFile, all agree
//   rank 0: CommitTag             -> all agree
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/manifest.pb.h"
#include "checkpoint/shard_file.h"

namespace zerotrain::checkpoint {

// `<dir>/<tag>`. The tag must already be chosen: pass DefaultTag(steps) for the usual name; ""
// is refused like any other invalid tag (ValidateTag).
struct TagLocation {
  std::string dir;
  std::string tag;
};
std::string TagDirectory(const TagLocation& at);  // "<dir>/<tag>"

// One array of a rank's shard file; `data` must stay valid until WriteRankFile returns.
struct NamedArray {
  std::string name;
  ArrayDType dtype = ArrayDType::kFloat32;
  const void* data = nullptr;
  int64_t numel = 0;
};

// What rank 0 lists in the manifest for one rank's file: WriteRankFile's size and checksum as
// that rank reported them.
struct RankFile {
  int rank = 0;
  int64_t size = 0;
  uint32_t crc32c = 0;
  bool holds_state = true;  // holds layout rank `rank`'s per-element arrays (else only e.g. RNG)
};

// Rank 0 only, before any rank writes. Removes the temporaries (atomic_file.h) a killed save
// left in `<dir>` and its tag directories. Refuses (AlreadyExists) the tag `<dir>/latest` names:
// the last complete checkpoint must survive the save that replaces it. Any other existing tag
// is rewritten; a complete one (a save killed between its manifest and `latest`, or an older
// run's) loses its manifest first, durably, so a crash during the rewrite leaves a tag nothing
// loads rather than a mix of old and new files. Creates `<dir>/<tag>` (and `<dir>`).
absl::Status PrepareTag(const TagLocation& at);

// Every rank, after PrepareTag succeeded: opens `<dir>/<tag>/rank_<rank>.zts` for rank
// `identity.rank`, recording `identity` (its tag is set to at.tag) in the file's header; the
// arrays' contents then arrive piece by piece and Commit makes the file appear, crash-safely.
absl::StatusOr<ShardStreamWriter> OpenRankFile(const TagLocation& at, ShardIdentity identity,
                                               std::vector<ArraySpec> arrays);
// The same for arrays held whole in memory, written in one call.
absl::StatusOr<WrittenFile> WriteRankFile(const TagLocation& at, ShardIdentity identity,
                                          const std::vector<NamedArray>& arrays);

// Rank 0 only, after every rank's WriteRankFile succeeded. The manifest's run id, world size,
// stage and optimizer steps must be those the ranks' identities recorded (the reader compares
// them). Sets the manifest's tag and its
// `files` (replacing any there) from `files`, writes `<dir>/<tag>/manifest.ztm`, then points
// `<dir>/latest` at the tag. Refuses (InvalidArgument, before writing anything) a file list the
// reader would refuse: a rank listed twice, or a layout rank in [0, layout_world_size) without a
// state-holding file.
absl::Status CommitTag(const TagLocation& at, Manifest manifest,
                       const std::vector<RankFile>& files);

}  // namespace zerotrain::checkpoint
