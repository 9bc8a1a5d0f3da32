// The tag protocol (tag_writer.h) on the real filesystem, with two "ranks" played in one
// process: what it commits reads back through CheckpointReader (the engine's and the
// consolidation tool's reader, so it is the loader's view that is tested), the tag `latest`
// names is refused, a stale complete tag is rewritten without ever loading half-old, and bad
// tags and unwritable places fail with one error naming the path.
#include "checkpoint/tag_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "gtest/gtest.h"
#include "partition/shard_layout.h"

namespace zerotrain::checkpoint {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kBucket = 8;
const std::vector<int64_t> kNumels = {5, 12, 3};  // 20 elements, padded to 24 over 2 ranks

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base ? base : "/tmp", "/tag_writer/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<float> Flat(float base) {
  std::vector<float> flat;
  for (int64_t i = 0; i < 20; ++i) flat.push_back(base + 0.5f * i);
  return flat;
}

constexpr uint64_t kRunId = 0x5eed0000abcdull;

// What rank r's file of a save of ManifestFor records.
ShardIdentity IdentityOf(int rank) {
  ShardIdentity id;
  id.run_id = kRunId;
  id.rank = rank;
  id.world_size = kWorld;
  id.stage = 1;
  return id;
}

Manifest ManifestFor() {
  Manifest m;
  m.set_run_id(kRunId);
  m.set_world_size(kWorld);
  m.set_stage(1);
  m.set_layout_world_size(kWorld);
  m.set_bucket_numel(kBucket);
  m.add_state_arrays("exp_avg");
  for (size_t i = 0; i < kNumels.size(); ++i) {
    ParameterEntry* p = m.add_params();
    p->set_name(absl::StrCat("p", i));
    p->add_shape(kNumels[i]);
    p->set_numel(kNumels[i]);
    p->set_dtype("Float");
  }
  return m;
}

// Rank r's slice of `flat` in the saving layout, as the engine's shard holds it.
std::vector<float> ShardOf(const std::vector<float>& flat, int rank) {
  auto layout = partition::ShardLayout::Create(kNumels, kWorld, kBucket);
  EXPECT_TRUE(layout.ok()) << layout.status();
  std::vector<float> shard(layout->shard_numel(), 0.0f);
  for (size_t b = 0; b < layout->buckets().size(); ++b) {
    const partition::LayoutBucket& bucket = layout->buckets()[b];
    for (int64_t j = 0; j < bucket.slice; ++j) {
      const int64_t idx = layout->OwnedBegin(static_cast<int>(b), rank) + j;
      if (idx < static_cast<int64_t>(flat.size())) shard[bucket.shard_offset + j] = flat[idx];
    }
  }
  return shard;
}

// Both ranks write (master = flat, exp_avg = -flat, an rng byte array); returns their files.
std::vector<RankFile> WriteBothRanks(const TagLocation& at, const std::vector<float>& flat) {
  std::vector<RankFile> files;
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<float> master = ShardOf(flat, r);
    std::vector<float> exp_avg;
    for (float v : master) exp_avg.push_back(-v);
    const std::string rng = absl::StrCat("rng of rank ", r);
    auto w = WriteRankFile(
        at, IdentityOf(r),
        {{kMasterArray, ArrayDType::kFloat32, master.data(), static_cast<int64_t>(master.size())},
         {"exp_avg", ArrayDType::kFloat32, exp_avg.data(), static_cast<int64_t>(exp_avg.size())},
         {kRngArray, ArrayDType::kBytes, rng.data(), static_cast<int64_t>(rng.size())}});
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return {};
    EXPECT_EQ(w->path, absl::StrCat(TagDirectory(at), "/", ShardFileName(r)));
    files.push_back({r, w->size, w->crc32c, true});
  }
  return files;
}

void SaveTag(const TagLocation& at, const std::vector<float>& flat) {
  ASSERT_TRUE(PrepareTag(at).ok());
  const std::vector<RankFile> files = WriteBothRanks(at, flat);
  ASSERT_EQ(files.size(), static_cast<size_t>(kWorld));
  absl::Status s = CommitTag(at, ManifestFor(), files);
  ASSERT_TRUE(s.ok()) << s;
}

// Every parameter of checkpoint `tag` ("" = latest) equals `flat`, bitwise.
void ExpectHolds(const std::string& dir, const std::string& tag, const std::vector<float>& flat) {
  auto reader = CheckpointReader::Open(dir, tag);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE((*reader)->VerifyFileChecksums().ok());
  std::vector<float> got;
  for (int i = 0; i < (*reader)->num_params(); ++i) {
    auto p = (*reader)->ReadParam(i);
    ASSERT_TRUE(p.ok()) << p.status();
    got.insert(got.end(), p->begin(), p->end());
  }
  EXPECT_EQ(got, flat);
}

TEST(TagWriter, RoundTripReadsBackThroughTheReader) {
  const std::string dir = TempDir("round_trip");
  const TagLocation at{dir, DefaultTag(3)};
  const std::vector<float> flat = Flat(1.25f);
  SaveTag(at, flat);
  auto latest = ReadLatest(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, "global_step3");
  ExpectHolds(dir, "", flat);

  auto reader = CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok());
  const Manifest& m = (*reader)->manifest();
  EXPECT_EQ(m.tag(), "global_step3");
  ASSERT_EQ(m.files_size(), kWorld);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(m.files(r).name(), ShardFileName(r));
    EXPECT_EQ(m.files(r).rank(), r);
    EXPECT_EQ(m.files(r).size(), static_cast<int64_t>(std::filesystem::file_size(
                                     absl::StrCat(dir, "/global_step3/", ShardFileName(r)))));
    auto rng = (*reader)->ReadRankBytes(r, kRngArray);
    ASSERT_TRUE(rng.ok()) << rng.status();
    EXPECT_EQ(std::string(rng->begin(), rng->end()), absl::StrCat("rng of rank ", r));
  }
  std::vector<float> exp_avg(20);
  ASSERT_TRUE((*reader)->ReadFlat("exp_avg", 0, 20, exp_avg.data()).ok());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(exp_avg[i], -flat[i]);
  // No temporary files are left behind.
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

// A run's output directory given where its checkpoints directory was meant (consolidate's
// --checkpoint_dir, run.resume_from) points at the right one.
TEST(TagWriter, ARunDirectoryPointsAtItsCheckpoints) {
  const std::string run = TempDir("run_dir");
  SaveTag(TagLocation{run + "/checkpoints", DefaultTag(3)}, Flat(1.0f));
  auto latest = ReadLatest(run);
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(
      std::string(latest.status().message())
          .find("; it is a run's output directory: its checkpoints are in " + run + "/checkpoints"),
      std::string::npos)
      << latest.status();
  EXPECT_TRUE(ReadLatest(run + "/checkpoints").ok());
  auto empty = ReadLatest(TempDir("no_run_dir"));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(std::string(empty.status().message()).find("output directory"), std::string::npos);
}

TEST(TagWriter, RefusesTheTagLatestNamesAndLeavesItIntact) {
  const std::string dir = TempDir("refuse_latest");
  const std::vector<float> flat = Flat(2.0f);
  SaveTag({dir, "t"}, flat);
  absl::Status s = PrepareTag({dir, "t"});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find(absl::StrCat(dir, "/latest names")), std::string::npos) << s;
  EXPECT_NE(s.message().find(absl::StrCat("checkpoint ", dir, "/t ")), std::string::npos) << s;
  ExpectHolds(dir, "t", flat);
  // Another tag is fine, and moves `latest` only when committed.
  ASSERT_TRUE(PrepareTag({dir, "u"}).ok());
  EXPECT_EQ(*ReadLatest(dir), "t");
}

// A save killed between its manifest and `latest` left tag "b" complete but unlisted.
TEST(TagWriter, StaleCompleteTagIsRewrittenAndNeverLoadsHalfOld) {
  const std::string dir = TempDir("stale");
  const std::vector<float> a = Flat(1.0f), old_b = Flat(100.0f), new_b = Flat(-7.0f);
  SaveTag({dir, "a"}, a);
  SaveTag({dir, "b"}, old_b);
  ASSERT_TRUE(WriteLatest(dir, "a").ok());
  ExpectHolds(dir, "b", old_b);  // complete, just not listed

  ASSERT_TRUE(PrepareTag({dir, "b"}).ok());
  // Unlisted: the old files are still there, but no reader takes them as a checkpoint.
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(dir, "/b/", kManifestFileName)));
  EXPECT_TRUE(std::filesystem::exists(absl::StrCat(dir, "/b/", ShardFileName(0))));
  EXPECT_EQ(CheckpointReader::Open(dir, "b").status().code(), absl::StatusCode::kNotFound);
  // A crash after some ranks rewrote their files: still nothing loads from "b", `latest` is "a".
  const std::vector<RankFile> files = WriteBothRanks({dir, "b"}, new_b);
  ASSERT_EQ(files.size(), static_cast<size_t>(kWorld));
  EXPECT_FALSE(CheckpointReader::Open(dir, "b").ok());
  ExpectHolds(dir, "", a);

  ASSERT_TRUE(CommitTag({dir, "b"}, ManifestFor(), files).ok());
  EXPECT_EQ(*ReadLatest(dir), "b");
  ExpectHolds(dir, "", new_b);
}

TEST(TagWriter, InvalidTagsAreRefusedBeforeAnythingIsWritten) {
  const std::string dir = TempDir("invalid");
  const float x = 1;
  for (const std::string tag : {"", ".", "..", ".hidden", "a/b", "x\ny"}) {
    const TagLocation at{dir, tag};
    for (const absl::Status& s :
         {PrepareTag(at),
          WriteRankFile(at, IdentityOf(0), {{kMasterArray, ArrayDType::kFloat32, &x, 1}}).status(),
          CommitTag(at, ManifestFor(), {{0, 1, 0, true}, {1, 1, 0, true}})}) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "tag '" << tag << "': " << s;
      EXPECT_NE(s.message().find("checkpoint tag '"), std::string::npos) << s;
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(TagWriter, BadFileListIsRefusedBeforeLatestMoves) {
  const std::string dir = TempDir("bad_files");
  SaveTag({dir, "good"}, Flat(0.0f));
  ASSERT_TRUE(PrepareTag({dir, "t"}).ok());
  const std::vector<RankFile> files = WriteBothRanks({dir, "t"}, Flat(3.0f));
  ASSERT_EQ(files.size(), static_cast<size_t>(kWorld));
  absl::Status twice = CommitTag({dir, "t"}, ManifestFor(), {files[0], files[0]});
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("rank 0 is listed twice"), std::string::npos) << twice;
  absl::Status missing = CommitTag({dir, "t"}, ManifestFor(), {files[0]});
  EXPECT_NE(missing.message().find("no state-holding file for layout rank 1"), std::string::npos)
      << missing;
  EXPECT_NE(missing.message().find(absl::StrCat(dir, "/t/manifest.ztm")), std::string::npos)
      << missing;
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(dir, "/t/", kManifestFileName)));
  EXPECT_EQ(*ReadLatest(dir), "good");
}

// Root ignores permission bits, so the portable unwritable place is one under a regular file.
TEST(TagWriter, UnwritablePlaceGivesOneErrorNamingThePath) {
  const std::string base = TempDir("unwritable");
  const std::string file = absl::StrCat(base, "/plain_file");
  std::ofstream(file) << "not a directory";
  const std::string dir = absl::StrCat(file, "/ckpt");
  absl::Status s = PrepareTag({dir, "t"});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            absl::StrCat("cannot create checkpoint directory ", dir, "/t: Not a directory"));

  const float x = 1;
  absl::StatusOr<WrittenFile> w =
      WriteRankFile({dir, "t"}, IdentityOf(1), {{"a", ArrayDType::kFloat32, &x, 1}});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(w.status().message().find(absl::StrCat("cannot write ", dir, "/t/rank_1.zts")),
            std::string::npos)
      << w.status();
  EXPECT_NE(w.status().message().find("every rank must see the same"), std::string::npos);

  absl::Status c = CommitTag({dir, "t"}, ManifestFor(), {{0, 1, 0, true}, {1, 1, 0, true}});
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.message().find(absl::StrCat(dir, "/t/manifest.ztm")), std::string::npos) << c;

  if (geteuid() != 0) {  // a read-only directory, where permission bits count
    const std::string ro = absl::StrCat(base, "/read_only");
    std::filesystem::create_directories(ro);
    chmod(ro.c_str(), 0555);
    absl::Status p = PrepareTag({ro, "t"});
    EXPECT_EQ(p.message(),
              absl::StrCat("cannot create checkpoint directory ", ro, "/t: Permission denied"));
    chmod(ro.c_str(), 0755);
  }
}

TEST(TagWriter, BadArrayNamesTheFile) {
  const std::string dir = TempDir("bad_array");
  ASSERT_TRUE(PrepareTag({dir, "t"}).ok());
  const float x = 1;
  auto w = WriteRankFile({dir, "t"}, IdentityOf(0),
                         {{"a", ArrayDType::kFloat32, &x, 1}, {"a", ArrayDType::kFloat32, &x, 1}});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find(absl::StrCat("shard file ", dir, "/t/rank_0.zts: ")),
            std::string::npos)
      << w.status();
  EXPECT_NE(w.status().message().find("duplicate 'a'"), std::string::npos) << w.status();
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(dir, "/t/rank_0.zts")));
}

}  // namespace
}  // namespace zerotrain::checkpoint
