// Checkpoint directory names, the `latest` pointer and the resharding reader.
#include "checkpoint/checkpoint_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/manifest.h"

namespace zerotrain::checkpoint {

std::string DefaultTag(int64_t optimizer_steps) {
  return absl::StrCat("global_step", optimizer_steps);
}

std::string ShardFileName(int rank) { return absl::StrCat("rank_", rank, ".zts"); }

bool IsShardFileName(const std::string& name) {
  int rank = 0;  // "rank_" and ".zts" are 9 characters
  if (name.size() <= 9 || name.compare(0, 5, "rank_") != 0) return false;
  return absl::SimpleAtoi(name.substr(5, name.size() - 9), &rank) && rank >= 0 &&
         name == ShardFileName(rank);
}

std::string FileListProblem(const Manifest& m) {
  std::set<int> ranks, holding;
  for (const ShardFileEntry& f : m.files()) {
    if (f.rank() < 0 || !ranks.insert(f.rank()).second) {
      return absl::StrCat("the file of rank ", f.rank(),
                          f.rank() < 0 ? " is invalid" : " is listed twice");
    }
    if (f.name() != ShardFileName(f.rank())) {
      return absl::StrCat("file entry ", f.name(), " for rank ", f.rank(), " (the file of rank ",
                          f.rank(), " is ", ShardFileName(f.rank()), ")");
    }
    if (f.holds_state()) holding.insert(f.rank());
  }
  for (int r = 0; r < m.layout_world_size(); ++r) {
    if (holding.count(r) == 0) {
      return absl::StrCat("no state-holding file for layout rank ", r, " (layout_world_size ",
                          m.layout_world_size(), ", ", m.files_size(), " files listed)");
    }
  }
  return "";
}

absl::Status ValidateTag(const std::string& tag) {
  if (tag.empty() || tag == "." || tag == ".." || tag[0] == '.' ||
      tag.find('/') != std::string::npos || tag.find('\n') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint tag '", tag, "': must be one directory name, not starting with '.'"));
  }
  return absl::OkStatus();
}

absl::Status WriteLatest(const std::string& dir, const std::string& tag) {
  return WriteFileAtomically(absl::StrCat(dir, "/", kLatestFileName), tag + "\n");
}

absl::StatusOr<std::string> ReadLatest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kLatestFileName);
  auto text = ReadWholeFile(path);
  if (!text.ok()) {
    // A run's output directory given where its checkpoints directory was meant.
    const std::string inner = absl::StrCat(dir, "/checkpoints");
    const bool run_dir = ReadWholeFile(absl::StrCat(inner, "/", kLatestFileName)).ok();
    return absl::NotFoundError(absl::StrCat(
        "no checkpoint in ", dir, ": ", text.status().message(),
        run_dir ? absl::StrCat("; it is a run's output directory: its checkpoints are in ", inner)
                : ""));
  }
  std::string tag(absl::StripAsciiWhitespace(*text));
  absl::Status s = ValidateTag(tag);
  if (!s.ok()) return absl::DataLossError(absl::StrCat(path, ": ", s.message()));
  return tag;
}

std::vector<FlatRun> RunsOf(const partition::ShardLayout& layout, int64_t begin, int64_t numel) {
  std::vector<FlatRun> runs;
  const auto& buckets = layout.buckets();
  const int64_t end = begin + numel;
  for (int64_t i = begin; i < end;) {
    auto it =
        std::upper_bound(buckets.begin(), buckets.end(), i,
                         [](int64_t v, const partition::LayoutBucket& b) { return v < b.begin; });
    const partition::LayoutBucket& b = *(it - 1);
    const int rank = layout.OwnerOf(i);
    const int64_t slice_end = b.begin + (rank + 1) * b.slice;
    const int64_t n = std::min(slice_end, end) - i;
    runs.push_back({rank, i, n, layout.ShardOffsetOf(i)});
    i += n;
  }
  return runs;
}

namespace {

// What is wrong with whose file `file` is, or "" when it is the one `entry` of `m` lists.
std::string IdentityProblem(const Manifest& m, const ShardFileEntry& entry,
                            const ShardFileReader& file) {
  const ShardIdentity want{m.run_id(),   m.tag(),        m.optimizer_steps(),
                           entry.rank(), m.world_size(), m.stage()};
  const std::optional<ShardIdentity>& have = file.identity();
  // A format 1 manifest (run id 0) lists format 1 files, which record no identity.
  if (!have && m.run_id() == 0) return "";
  if (have && *have == want) return "";
  return absl::StrCat("records ", have ? IdentityText(*have) : "no identity (shard format 1)",
                      ", the manifest expects ", IdentityText(want),
                      "; it belongs to another checkpoint, rank or run");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& dir,
                                                                         const std::string& tag) {
  std::string t = tag;
  if (t.empty()) {
    auto latest = ReadLatest(dir);
    if (!latest.ok()) return latest.status();
    t = *latest;
  }
  absl::Status s = ValidateTag(t);
  if (!s.ok()) return s;
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  r->tag_dir_ = absl::StrCat(dir, "/", t);
  const std::string mpath = absl::StrCat(r->tag_dir_, "/", kManifestFileName);
  auto m = ReadManifest(mpath);
  if (!m.ok()) return m.status();
  r->manifest_ = *std::move(m);
  const Manifest& mf = r->manifest_;
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", mpath, ": ", what));
  };
  if (mf.tag() != t) {
    return bad(absl::StrCat(
        "records tag ", mf.tag(), ", but sits in tag directory ", t,
        tag.empty() ? absl::StrCat(" (the one ", dir, "/", kLatestFileName, " names)") : "",
        ": it belongs to another checkpoint"));
  }
  std::vector<int64_t> numels;
  for (const ParameterEntry& p : mf.params()) {
    int64_t n = 1;
    for (int64_t d : p.shape()) n *= d;
    if (n != p.numel() || p.numel() < 0) return bad(absl::StrCat("parameter ", p.name(), " numel"));
    numels.push_back(p.numel());
  }
  const std::vector<int> segment_starts(mf.segment_starts().begin(), mf.segment_starts().end());
  auto layout = partition::ShardLayout::Create(numels, mf.layout_world_size(), mf.bucket_numel(),
                                               segment_starts);
  if (!layout.ok()) return bad(std::string(layout.status().message()));
  r->layout_ = std::make_unique<partition::ShardLayout>(*std::move(layout));
  if (const std::string problem = FileListProblem(mf); !problem.empty()) return bad(problem);
  for (int i = 0; i < mf.files_size(); ++i) {
    const ShardFileEntry& f = mf.files(i);
    r->file_of_rank_.emplace(f.rank(), i);
    const std::string path = absl::StrCat(r->tag_dir_, "/", f.name());
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint ", r->tag_dir_, ": shard file ", path, " is missing"));
    }
    // Whose file it is first: a stale or swapped file is usually the right size.
    auto file = ShardFileReader::Open(path);
    if (!file.ok()) return file.status();
    if (const std::string problem = IdentityProblem(mf, f, *file); !problem.empty()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard file ", path, ": ", problem));
    }
    if (st.st_size != f.size()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard file ", path, ": ", st.st_size,
                                              " bytes, the manifest says ", f.size(),
                                              st.st_size < f.size() ? " (truncated)" : ""));
    }
    r->open_[f.rank()] = std::make_unique<ShardFileReader>(*std::move(file));
  }
  return r;
}

absl::StatusOr<const ShardFileReader*> CheckpointReader::FileOf(int rank) const {
  auto open = open_.find(rank);  // Open opened every listed file
  if (open == open_.end()) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", tag_dir_, ": no file of rank ", rank));
  }
  return open->second.get();
}

absl::Status CheckpointReader::ReadFlat(const std::string& array, int64_t begin, int64_t numel,
                                        float* out) {
  // Flat indices run to padded_numel(): a stage 3 layout has padding between segments too.
  if (begin < 0 || numel < 0 || begin + numel > layout_->padded_numel()) {
    return absl::OutOfRangeError(absl::StrCat("checkpoint ", tag_dir_, ": flat range [", begin,
                                              ", ", begin + numel, ") outside ",
                                              layout_->padded_numel(), " elements"));
  }
  for (const FlatRun& run : RunsOf(*layout_, begin, numel)) {
    auto file = FileOf(run.rank);
    if (!file.ok()) return file.status();
    const ArrayInfo* a = (*file)->Find(array);
    if (a == nullptr || a->dtype != ArrayDType::kFloat32) {
      return absl::DataLossError(
          absl::StrCat("checkpoint shard file ", (*file)->path(), ": no fp32 array '", array, "'"));
    }
    absl::Status s =
        (*file)->ReadRange(array, run.shard_offset, run.numel, out + (run.begin - begin));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> CheckpointReader::ReadParam(int i) {
  if (i < 0 || i >= num_params()) {
    return absl::OutOfRangeError(absl::StrCat("checkpoint ", tag_dir_, ": parameter #", i));
  }
  std::vector<float> out(layout_->param_numel(i));
  absl::Status s = ReadFlat(kMasterArray, param_offset(i), layout_->param_numel(i), out.data());
  if (!s.ok()) return s;
  return out;
}

absl::Status CheckpointReader::CheckStateArrays(const std::vector<std::string>& arrays) const {
  for (const ShardFileEntry& f : manifest_.files()) {
    if (!f.holds_state()) continue;
    auto file = FileOf(f.rank());
    if (!file.ok()) return file.status();
    for (const std::string& name : arrays) {
      const ArrayInfo* a = (*file)->Find(name);
      if (a == nullptr || a->dtype != ArrayDType::kFloat32 || a->numel < layout_->shard_numel()) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint shard file ", (*file)->path(), ": array '", name, "' ",
            a == nullptr ? "is missing"
                         : absl::StrCat("is ", a->dtype == ArrayDType::kFloat32 ? "fp32" : "bytes",
                                        " of ", a->numel, " elements"),
            "; the layout needs fp32 of ", layout_->shard_numel()));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> CheckpointReader::ReadRankBytes(int rank,
                                                                     const std::string& array) {
  auto file = FileOf(rank);
  if (!file.ok()) return file.status();
  if ((*file)->Find(array) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint shard file ", (*file)->path(), ": no array '", array, "'"));
  }
  return (*file)->ReadAllBytes(array);
}

namespace {

// A file whose checksum is not the manifest's: the first chunk whose own checksum fails says
// what changed (a changed header or table fails to open); OK when every chunk is intact.
absl::Status LocateDamage(const std::string& path) {
  auto file = ShardFileReader::Open(path);
  if (!file.ok()) return file.status();
  std::vector<char> buf(kDefaultChunkBytes);
  for (const ArrayInfo& a : file->arrays()) {
    const int64_t per = kDefaultChunkBytes / ArrayDTypeSize(a.dtype);
    for (int64_t at = 0; at < a.numel; at += per) {
      absl::Status s = file->ReadRange(a.name, at, std::min(per, a.numel - at), buf.data());
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckpointReader::VerifyFileChecksums(int part, int parts) const {
  for (int i = part; i < manifest_.files_size(); i += std::max(parts, 1)) {
    const ShardFileEntry& f = manifest_.files(i);
    const std::string path = absl::StrCat(tag_dir_, "/", f.name());
    auto crc = FileCrc32c(path);
    if (!crc.ok()) return crc.status();
    if (*crc != f.crc32c()) {
      const absl::Status located = LocateDamage(path);
      return absl::DataLossError(absl::StrCat(
          absl::StrFormat("checkpoint shard file %s: checksum mismatch with the manifest: CRC32C "
                          "0x%08x of the whole file, the manifest records 0x%08x (the file "
                          "changed after the save)",
                          path, *crc, f.crc32c()),
          located.ok() ? "" : absl::StrCat("; read chunk by chunk: ", located.message())));
    }
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::checkpoint
