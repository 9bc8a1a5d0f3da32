// The tag protocol's three phases (tag_writer.h): prepare, write each rank's file, commit.
#include "checkpoint/tag_writer.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "tools/status_macros.h"

namespace zerotrain::checkpoint {
namespace {

// A complete tag `latest` does not name: left by a save killed between its manifest and
// `latest`, or an older run's. Unlisting it first, durably, means a crash while it is rewritten
// leaves a tag without a manifest, which nothing loads, instead of a mix of old and new files.
absl::Status UnlistStaleTag(const std::string& tag_dir) {
  const std::string manifest = absl::StrCat(tag_dir, "/", kManifestFileName);
  std::error_code ec;
  const bool exists = std::filesystem::exists(manifest, ec);  // "not found" leaves ec clear
  if (ec)
    return absl::InternalError(absl::StrCat("cannot look for ", manifest, ": ", ec.message()));
  if (!exists) return absl::OkStatus();
  std::filesystem::remove(manifest, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot replace ", manifest, ": ", ec.message()));
  return FsyncDirectory(tag_dir);
}

// A killed save leaves AtomicFileWriter's temporaries behind, in the tag directory it wrote (shard
// files, the manifest) and in `dir` (`latest`). Nothing writes there while rank 0 prepares a tag.
// Only the temporaries of checkpoint files go: `dir` may hold other things.
absl::Status RemoveOrphanTemporaries(const std::string& dir) {
  std::error_code ec;
  // Not there yet (a first save), or not a directory (PrepareTag then says so): nothing to do.
  if (!std::filesystem::is_directory(dir, ec)) return absl::OkStatus();
  ZT_RETURN_IF_ERROR(RemoveTemporaries(dir, [](const std::string& target) {
                       return target == kLatestFileName;
                     }).status());
  std::vector<std::string> subdirs;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_directory(ec)) subdirs.push_back(e.path().string());
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  auto checkpoint_file = [](const std::string& target) {
    return target == kManifestFileName || IsShardFileName(target);
  };
  for (const std::string& sub : subdirs) {
    ZT_RETURN_IF_ERROR(RemoveTemporaries(sub, checkpoint_file).status());
  }
  return absl::OkStatus();
}

}  // namespace

std::string TagDirectory(const TagLocation& at) { return absl::StrCat(at.dir, "/", at.tag); }

absl::Status PrepareTag(const TagLocation& at) {
  ZT_RETURN_IF_ERROR(ValidateTag(at.tag));
  const std::string tag_dir = TagDirectory(at);
  // An unreadable or absent `latest` names nothing to protect; only a match is refused.
  absl::StatusOr<std::string> latest = ReadLatest(at.dir);
  if (latest.ok() && *latest == at.tag) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint ", tag_dir, " is the one ", at.dir,
                                                 "/", kLatestFileName,
                                                 " names; choose another tag or remove it"));
  }
  ZT_RETURN_IF_ERROR(RemoveOrphanTemporaries(at.dir));
  ZT_RETURN_IF_ERROR(UnlistStaleTag(tag_dir));
  std::error_code ec;
  std::filesystem::create_directories(tag_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create checkpoint directory ", tag_dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardStreamWriter> OpenRankFile(const TagLocation& at, ShardIdentity identity,
                                               std::vector<ArraySpec> arrays) {
  ZT_RETURN_IF_ERROR(ValidateTag(at.tag));
  const int rank = identity.rank;
  identity.tag = at.tag;
  const std::string tag_dir = TagDirectory(at);
  const std::string path = absl::StrCat(tag_dir, "/", ShardFileName(rank));
  if (rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard file of rank ", rank, " in ", tag_dir, ": invalid rank"));
  }
  // Rank 0 created it; a rank that cannot see it most likely does not share `dir` with rank 0,
  // which the bare "cannot create <temp file>" would not say.
  std::error_code ec;
  if (!std::filesystem::is_directory(tag_dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot write ", path, ": checkpoint directory ", tag_dir, " is not a directory on rank ",
        rank, ec ? absl::StrCat(" (", ec.message(), ")") : "",
        "; rank 0 creates it, and every rank must see the same ", at.dir));
  }
  return ShardStreamWriter::Open(path, std::move(arrays), identity);
}

absl::StatusOr<WrittenFile> WriteRankFile(const TagLocation& at, ShardIdentity identity,
                                          const std::vector<NamedArray>& arrays) {
  std::vector<ArraySpec> specs;
  for (const NamedArray& a : arrays) specs.push_back({a.name, a.dtype, a.numel});
  ZT_ASSIGN_OR_RETURN(ShardStreamWriter file, OpenRankFile(at, identity, std::move(specs)));
  for (size_t i = 0; i < arrays.size(); ++i) {
    ZT_RETURN_IF_ERROR(file.Append(static_cast<int>(i), arrays[i].data, arrays[i].numel));
  }
  return file.Commit();
}

absl::Status CommitTag(const TagLocation& at, Manifest manifest,
                       const std::vector<RankFile>& files) {
  ZT_RETURN_IF_ERROR(ValidateTag(at.tag));
  const std::string manifest_path = absl::StrCat(TagDirectory(at), "/", kManifestFileName);
  manifest.set_tag(at.tag);
  manifest.clear_files();
  for (const RankFile& f : files) {
    ShardFileEntry* e = manifest.add_files();
    e->set_name(ShardFileName(f.rank));
    e->set_rank(f.rank);
    e->set_size(f.size);
    e->set_crc32c(f.crc32c);
    e->set_holds_state(f.holds_state);
  }
  // Refused here, before `latest` moves off the previous good checkpoint, rather than at load.
  if (const std::string problem = FileListProblem(manifest); !problem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint manifest ", manifest_path, ": ", problem));
  }
  // The manifest, then `latest`: a crash before either leaves `latest` on the previous tag.
  ZT_RETURN_IF_ERROR(WriteManifest(manifest_path, manifest));
  return WriteLatest(at.dir, at.tag);
}

}  // namespace zerotrain::checkpoint
