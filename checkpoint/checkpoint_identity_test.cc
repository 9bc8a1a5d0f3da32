// Whose file each shard file is (shard_identity.h), checked by CheckpointReader::Open and the
// consolidation tool: valid files copied into the wrong place (the ranks' files swapped, an older
// step's file, an older manifest, a format 1 file among format 2 ones) and a file changed after
// the save are each one error naming the file, what it records and what the manifest expects;
// format 1 checkpoints still load; a killed save's temporaries go at the next PrepareTag.
// Checkpoints are written through the tag protocol (tag_writer.h), as the engine writes them.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "checkpoint/tag_writer.h"
#include "gtest/gtest.h"
#include "partition/shard_layout.h"

extern char** environ;

namespace zerotrain::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string g_tool;  // the consolidate binary: argv[1]
constexpr int kWorld = 2;
constexpr int kStage = 2;
constexpr uint64_t kRun = 0x0123456789abcdefull;
const std::vector<int64_t> kNumels = {5, 12, 3};  // 20 elements, over 2 ranks in buckets of 8

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base ? base : "/tmp", "/identity/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string RunText(uint64_t id) { return absl::StrFormat("run 0x%016x", id); }

Manifest ManifestAt(int64_t step, uint64_t run) {
  Manifest m;
  m.set_run_id(run);
  m.set_world_size(kWorld);
  m.set_stage(kStage);
  m.set_optimizer_steps(step);
  m.set_layout_world_size(kWorld);
  m.set_bucket_numel(8);
  for (size_t i = 0; i < kNumels.size(); ++i) {
    ParameterEntry* p = m.add_params();
    p->set_name(absl::StrCat("p", i));
    p->add_shape(kNumels[i]);
    p->set_numel(kNumels[i]);
    p->set_dtype("Float");
  }
  return m;
}

// Element i of the flat master saved at `step`: every step's values differ.
float Value(int64_t step, int64_t i) { return static_cast<float>(100 * step + i) * 0.5f; }

// Saves DefaultTag(step) of run `run` as the engine does: rank r's file holds its slice.
void Save(const std::string& dir, int64_t step, uint64_t run = kRun) {
  const TagLocation at{dir, DefaultTag(step)};
  ASSERT_TRUE(PrepareTag(at).ok());
  auto layout = partition::ShardLayout::Create(kNumels, kWorld, 8);
  ASSERT_TRUE(layout.ok());
  std::vector<RankFile> files;
  for (int r = 0; r < kWorld; ++r) {
    std::vector<float> shard(layout->shard_numel(), 0.0f);
    for (size_t b = 0; b < layout->buckets().size(); ++b) {
      const partition::LayoutBucket& bucket = layout->buckets()[b];
      for (int64_t j = 0; j < bucket.slice; ++j) {
        const int64_t idx = layout->OwnedBegin(static_cast<int>(b), r) + j;
        if (idx < layout->numel()) shard[bucket.shard_offset + j] = Value(step, idx);
      }
    }
    const ShardIdentity id{run, "", step, r, kWorld, kStage};
    auto w = WriteRankFile(
        at, id,
        {{kMasterArray, ArrayDType::kFloat32, shard.data(), static_cast<int64_t>(shard.size())}});
    ASSERT_TRUE(w.ok()) << w.status();
    files.push_back({r, w->size, w->crc32c, true});
  }
  absl::Status s = CommitTag(at, ManifestAt(step, run), files);
  ASSERT_TRUE(s.ok()) << s;
}

// Open's error for `dir` (its `latest`), which must contain every one of `words`.
void ExpectOpenFails(const std::string& dir, const std::vector<std::string>& words) {
  auto r = CheckpointReader::Open(dir);
  ASSERT_FALSE(r.ok()) << "opened " << dir;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  for (const std::string& w : words) {
    EXPECT_NE(r.status().message().find(w), std::string::npos)
        << "lacks '" << w << "': " << r.status();
  }
}

void ExpectHoldsStep(const std::string& dir, int64_t step) {
  auto r = CheckpointReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> got(20);
  ASSERT_TRUE((*r)->ReadFlat(kMasterArray, 0, 20, got.data()).ok());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(got[i], Value(step, i)) << i;
}

// Two saves in one directory, `latest` on global_step2.
std::string TwoSaves(const std::string& name) {
  const std::string dir = TempDir(name);
  Save(dir, 1);
  Save(dir, 2);
  return dir;
}

TEST(CheckpointIdentity, SavedFilesRecordWhoseTheyAre) {
  const std::string dir = TwoSaves("good");
  ExpectHoldsStep(dir, 2);
  auto f = ShardFileReader::Open(dir + "/global_step2/rank_1.zts");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(f->identity().has_value());
  EXPECT_EQ(*f->identity(), (ShardIdentity{kRun, "global_step2", 2, 1, kWorld, kStage}));
}

TEST(CheckpointIdentity, SwappedRanksFailNamingTheFile) {
  const std::string dir = TwoSaves("swapped");
  const std::string t = dir + "/global_step2/";
  fs::rename(t + "rank_0.zts", t + "x");
  fs::rename(t + "rank_1.zts", t + "rank_0.zts");
  fs::rename(t + "x", t + "rank_1.zts");
  ExpectOpenFails(dir, {t + "rank_0.zts: records rank 1 of " + RunText(kRun) + " step 2",
                        "the manifest expects rank 0 of " + RunText(kRun) + " step 2"});
}

TEST(CheckpointIdentity, OlderStepsShardFails) {
  const std::string dir = TwoSaves("stale");
  fs::copy_file(dir + "/global_step1/rank_1.zts", dir + "/global_step2/rank_1.zts",
                fs::copy_options::overwrite_existing);
  ExpectOpenFails(dir, {dir + "/global_step2/rank_1.zts: records rank 1 of " + RunText(kRun) +
                            " step 1 (tag global_step1, world size 2, stage 2)",
                        "expects rank 1 of " + RunText(kRun) + " step 2 (tag global_step2"});
}

TEST(CheckpointIdentity, AnotherRunsShardFails) {
  const std::string dir = TwoSaves("other_run");
  const std::string other = TempDir("other_run_2");
  Save(other, 2, /*run=*/42);
  fs::copy_file(other + "/global_step2/rank_0.zts", dir + "/global_step2/rank_0.zts",
                fs::copy_options::overwrite_existing);
  ExpectOpenFails(dir, {"rank_0.zts: records rank 0 of " + RunText(42) + " step 2",
                        "expects rank 0 of " + RunText(kRun) + " step 2"});
}

TEST(CheckpointIdentity, OlderManifestFailsThroughLatestAndByTag) {
  const std::string dir = TwoSaves("old_manifest");
  fs::copy_file(dir + "/global_step1/manifest.ztm", dir + "/global_step2/manifest.ztm",
                fs::copy_options::overwrite_existing);
  ExpectOpenFails(dir, {dir + "/global_step2/manifest.ztm: records tag global_step1",
                        "sits in tag directory global_step2", dir + "/latest names"});
  auto by_tag = CheckpointReader::Open(dir, "global_step2");
  ASSERT_FALSE(by_tag.ok());
  EXPECT_NE(by_tag.status().message().find("records tag global_step1"), std::string::npos);
  EXPECT_EQ(by_tag.status().message().find("latest"), std::string::npos) << by_tag.status();
  // `latest` pointing elsewhere than the manifest says is the same check.
  ASSERT_TRUE(WriteLatest(dir, "global_step1").ok());
  ExpectHoldsStep(dir, 1);
}

TEST(CheckpointIdentity, FormatOneShardAmongFormatTwoFails) {
  const std::string dir = TwoSaves("mixed_format");
  const float x[24] = {};
  ShardFileWriter old;  // no identity: format 1
  ASSERT_TRUE(old.Add(kMasterArray, ArrayDType::kFloat32, x, 12).ok());
  ASSERT_TRUE(old.Write(dir + "/global_step2/rank_1.zts").ok());
  ExpectOpenFails(dir, {"rank_1.zts: records no identity (shard format 1)",
                        "expects rank 1 of " + RunText(kRun)});
}

TEST(CheckpointIdentity, ChangedByteFailsTheWholeFileChecksum) {
  const std::string dir = TwoSaves("flipped");
  const std::string path = dir + "/global_step2/rank_1.zts";
  const int64_t at = fs::file_size(path) - 3;  // inside the data: Open does not read it
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    const char c = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x20));
  }
  auto r = CheckpointReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  // Shared by 2 ranks: rank 0's share is rank_0.zts alone.
  EXPECT_TRUE((*r)->VerifyFileChecksums(0, 2).ok());
  for (const absl::Status& s : {(*r)->VerifyFileChecksums(1, 2), (*r)->VerifyFileChecksums()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(path + ": checksum mismatch with the manifest"), std::string::npos)
        << s;
  }
}

// A checkpoint as builds before identities wrote it: format 1 shard files and manifest.
TEST(CheckpointIdentity, FormatOneCheckpointStillLoads) {
  const std::string dir = TempDir("format1");
  fs::create_directories(dir + "/old");
  Manifest m = ManifestAt(3, /*run=*/0);
  m.set_tag("old");
  auto layout = partition::ShardLayout::Create(kNumels, kWorld, 8);
  ASSERT_TRUE(layout.ok());
  for (int r = 0; r < kWorld; ++r) {
    std::vector<float> shard(layout->shard_numel(), 0.0f);
    for (size_t b = 0; b < layout->buckets().size(); ++b) {
      const partition::LayoutBucket& bucket = layout->buckets()[b];
      for (int64_t j = 0; j < bucket.slice; ++j) {
        const int64_t idx = layout->OwnedBegin(static_cast<int>(b), r) + j;
        if (idx < layout->numel()) shard[bucket.shard_offset + j] = Value(3, idx);
      }
    }
    ShardFileWriter w;
    ASSERT_TRUE(w.Add(kMasterArray, ArrayDType::kFloat32, shard.data(), shard.size()).ok());
    auto f = w.Write(dir + "/old/" + ShardFileName(r));
    ASSERT_TRUE(f.ok());
    ShardFileEntry* e = m.add_files();
    e->set_name(ShardFileName(r));
    e->set_rank(r);
    e->set_size(f->size);
    e->set_crc32c(f->crc32c);
    e->set_holds_state(true);
  }
  ASSERT_TRUE(WriteFileAtomically(dir + "/old/manifest.ztm", EncodeManifest(m, 1)).ok());
  ASSERT_TRUE(WriteLatest(dir, "old").ok());
  auto f = ShardFileReader::Open(dir + "/old/rank_0.zts");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->identity().has_value());
  ExpectHoldsStep(dir, 3);
  auto r = CheckpointReader::Open(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->manifest().format_version(), 1u);
  EXPECT_TRUE((*r)->VerifyFileChecksums().ok());
}

TEST(CheckpointIdentity, PrepareTagRemovesOrphanTemporariesOnly) {
  EXPECT_EQ(TemporaryTarget("rank_1.zts.tmp.123.4"), "rank_1.zts");
  EXPECT_EQ(TemporaryTarget("latest.tmp.9.0"), "latest");
  for (const std::string no : {"rank_1.zts", "x.tmp.12", "x.tmp.a.1", ".tmp.1.2", "x.tmp.1."}) {
    EXPECT_EQ(TemporaryTarget(no), "") << no;
  }
  const std::string dir = TwoSaves("orphans");
  const std::vector<std::string> orphans = {"latest.tmp.77.1", "global_step1/rank_0.zts.tmp.77.2",
                                            "global_step2/manifest.ztm.tmp.77.3"};
  const std::vector<std::string> others = {"notes.tmp.77.4", "global_step1/data.tmp.77.5",
                                           "global_step1/rank_0.zts.tmp.x"};
  for (const std::string& n : orphans) std::ofstream(dir + "/" + n) << "left by a kill";
  for (const std::string& n : others) std::ofstream(dir + "/" + n) << "not ours";
  ASSERT_TRUE(PrepareTag({dir, "global_step3"}).ok());
  for (const std::string& n : orphans) EXPECT_FALSE(fs::exists(dir + "/" + n)) << n;
  for (const std::string& n : others) EXPECT_TRUE(fs::exists(dir + "/" + n)) << n;
  ExpectHoldsStep(dir, 2);
}

// Runs the consolidate tool; returns its exit status and (through `err`) its stderr.
int RunTool(const std::vector<std::string>& args, std::string* err) {
  const std::string err_path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tool_stderr");
  std::vector<std::string> all = {g_tool};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, g_tool.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(err_path);
  err->assign(std::istreambuf_iterator<char>(in), {});
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CheckpointIdentity, ConsolidateRefusesMisplacedAndChangedFiles) {
  std::string err;
  EXPECT_EQ(RunTool({"--help"}, &err), 0) << err;
  const std::string dir = TwoSaves("consolidate");
  const std::string out = dir + "/model.pt";
  ASSERT_EQ(RunTool({"--checkpoint_dir=" + dir, "--output=" + out}, &err), 0) << err;
  ASSERT_TRUE(fs::exists(out));
  fs::remove(out);

  const std::string t = dir + "/global_step2/";
  fs::copy_file(dir + "/global_step1/rank_0.zts", t + "rank_0.zts",
                fs::copy_options::overwrite_existing);
  EXPECT_NE(RunTool({"--checkpoint_dir=" + dir, "--output=" + out}, &err), 0);
  EXPECT_NE(err.find(t + "rank_0.zts: records rank 0 of " + RunText(kRun) + " step 1"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(out));

  // A changed byte: refused by the whole-file checksum before anything is written.
  Save(dir, 3);
  const std::string path = dir + "/global_step3/rank_1.zts";
  const int64_t at = fs::file_size(path) - 1;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    const char c = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x01));
  }
  EXPECT_NE(RunTool({"--checkpoint_dir=" + dir, "--output=" + out}, &err), 0);
  EXPECT_NE(err.find(path + ": checksum mismatch with the manifest"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace zerotrain::checkpoint

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) return 2;  // BUILD passes the consolidate tool's path
  zerotrain::checkpoint::g_tool = argv[1];
  return RUN_ALL_TESTS();
}
