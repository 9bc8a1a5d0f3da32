// Pruning old checkpoint tags (tag_retention.h).
#include "checkpoint/tag_retention.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "tools/status_macros.h"

namespace zerotrain::checkpoint {
namespace {

namespace fs = std::filesystem;

struct SavedTag {
  std::string tag;
  fs::file_time_type committed;  // the manifest's write time
  int64_t steps = 0;             // a tie-break: file times are as coarse as the kernel's tick
};

// The subdirectories of `dir` that are checkpoint tags: a manifest that reads and names them.
absl::StatusOr<std::vector<SavedTag>> SavedTags(const std::string& dir) {
  std::error_code ec;
  std::vector<SavedTag> tags;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string tag = e.path().filename().string();
    if (!e.is_directory(ec) || !ValidateTag(tag).ok()) continue;
    const std::string manifest = absl::StrCat(e.path().string(), "/", kManifestFileName);
    auto m = ReadManifest(manifest);
    if (!m.ok() || m->tag() != tag) continue;
    const fs::file_time_type committed = fs::last_write_time(manifest, ec);
    if (ec) break;
    tags.push_back({tag, committed, m->optimizer_steps()});
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot list checkpoints in ", dir, ": ", ec.message()));
  }
  return tags;
}

absl::Status RemoveTag(const std::string& dir, const std::string& tag) {
  const std::string tag_dir = absl::StrCat(dir, "/", tag);
  std::error_code ec;
  fs::remove(absl::StrCat(tag_dir, "/", kManifestFileName), ec);
  if (!ec) ZT_RETURN_IF_ERROR(FsyncDirectory(tag_dir));
  if (!ec) fs::remove_all(tag_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot remove the old checkpoint ", tag_dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PruneTags(const std::string& dir, int64_t keep_last) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  // Without a readable `latest` there is no telling which tag must survive: remove nothing.
  ZT_ASSIGN_OR_RETURN(const std::string latest, ReadLatest(dir));
  ZT_ASSIGN_OR_RETURN(std::vector<SavedTag> tags, SavedTags(dir));
  std::sort(tags.begin(), tags.end(), [](const SavedTag& a, const SavedTag& b) {
    if (a.committed != b.committed) return a.committed > b.committed;
    return a.steps != b.steps ? a.steps > b.steps : a.tag > b.tag;
  });
  int64_t kept = 1;  // `latest`'s, wherever it sorts
  for (const SavedTag& t : tags) {
    if (t.tag == latest) continue;
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    ZT_RETURN_IF_ERROR(RemoveTag(dir, t.tag));
    removed.push_back(t.tag);
  }
  ZT_RETURN_IF_ERROR(FsyncDirectory(dir));
  return removed;
}

}  // namespace zerotrain::checkpoint
