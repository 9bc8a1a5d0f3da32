// The checkpoint format library against independent expectations: the CRC32C test vector from
// RFC 3720, shard files read back (whole and by range) as written, resharded flat reads equal to
// the original flat array for several layouts, and the errors for each kind of bad input.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "gtest/gtest.h"

namespace zerotrain::checkpoint {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base ? base : "/tmp", "/", name);
  std::string cmd = absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'");
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

TEST(Crc32c, KnownVectors) {
  // RFC 3720 B.4: 32 bytes of zeros, and "123456789" (the usual check value).
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cExtend(Crc32c("1234", 4), "56789", 5), 0xE3069283u);
}

TEST(ShardFile, RoundTripAndRanges) {
  const std::string dir = TempDir("shard_round_trip");
  std::vector<float> a(1000);
  std::iota(a.begin(), a.end(), 0.5f);
  std::string bytes = "hello rng";
  ShardFileWriter w(/*chunk_bytes=*/64);
  ASSERT_TRUE(w.Add("a", ArrayDType::kFloat32, a.data(), a.size()).ok());
  ASSERT_TRUE(w.Add("b", ArrayDType::kBytes, bytes.data(), bytes.size()).ok());
  ASSERT_TRUE(w.Add("empty", ArrayDType::kFloat32, nullptr, 0).ok());
  EXPECT_FALSE(w.Add("a", ArrayDType::kFloat32, a.data(), 1).ok());
  auto written = w.Write(dir + "/f.zts");
  ASSERT_TRUE(written.ok()) << written.status();
  auto whole = ReadWholeFile(dir + "/f.zts");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(written->size, static_cast<int64_t>(whole->size()));
  EXPECT_EQ(written->crc32c, Crc32c(whole->data(), whole->size()));
  auto r = ShardFileReader::Open(dir + "/f.zts");
  ASSERT_TRUE(r.ok()) << r.status();
  for (auto [off, n] :
       std::vector<std::pair<int, int>>{{0, 1000}, {3, 17}, {15, 1}, {999, 1}, {16, 16}}) {
    std::vector<float> got(n);
    ASSERT_TRUE(r->ReadRange("a", off, n, got.data()).ok());
    for (int i = 0; i < n; ++i) EXPECT_EQ(got[i], a[off + i]);
  }
  auto b = r->ReadAllBytes("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::string(b->begin(), b->end()), bytes);
  std::vector<float> x(2);
  EXPECT_EQ(r->ReadRange("a", 999, 2, x.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(r->ReadRange("zzz", 0, 1, x.data()).ok());
}

// Writes a synthetic checkpoint of a flat array `flat` (params of `numels`) in the layout of
// `world` ranks, as the engine does: rank r's file holds its shard under "master".
void WriteFlatCheckpoint(const std::string& dir, const std::string& tag,
                         const std::vector<int64_t>& numels, int world, int64_t bucket,
                         const std::vector<float>& flat) {
  auto layout = partition::ShardLayout::Create(numels, world, bucket);
  ASSERT_TRUE(layout.ok());
  const std::string tdir = dir + "/" + tag;
  ASSERT_EQ(std::system(("mkdir -p '" + tdir + "'").c_str()), 0);
  Manifest m;
  m.set_tag(tag);
  m.set_world_size(world);
  m.set_layout_world_size(world);
  m.set_bucket_numel(bucket);
  for (size_t i = 0; i < numels.size(); ++i) {
    ParameterEntry* p = m.add_params();
    p->set_name(absl::StrCat("p", i));
    p->add_shape(numels[i]);
    p->set_numel(numels[i]);
  }
  for (int r = 0; r < world; ++r) {
    std::vector<float> shard(layout->shard_numel(), 0.0f);
    for (const auto& b : layout->buckets()) {
      for (int64_t j = 0; j < b.slice; ++j) {
        const int64_t idx = layout->OwnedBegin(&b - &layout->buckets()[0], r) + j;
        if (idx < static_cast<int64_t>(flat.size())) shard[b.shard_offset + j] = flat[idx];
      }
    }
    ShardFileWriter w(32);
    ASSERT_TRUE(w.Add(kMasterArray, ArrayDType::kFloat32, shard.data(), shard.size()).ok());
    auto f = w.Write(tdir + "/" + ShardFileName(r));
    ASSERT_TRUE(f.ok());
    ShardFileEntry* e = m.add_files();
    e->set_name(ShardFileName(r));
    e->set_rank(r);
    e->set_size(f->size);
    e->set_crc32c(f->crc32c);
    e->set_holds_state(true);
  }
  ASSERT_TRUE(WriteManifest(tdir + "/" + kManifestFileName, m).ok());
  ASSERT_TRUE(WriteLatest(dir, tag).ok());
}

TEST(CheckpointReader, ReadsAnyRangeForAnyLayout) {
  const std::vector<int64_t> numels = {7, 30, 1, 45};
  std::vector<float> flat(83);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = 0.25f * i - 3;
  for (int world : {1, 2, 3, 4}) {
    for (int64_t bucket : {5, 16, 1000}) {
      const std::string dir = TempDir(absl::StrCat("reader_w", world, "_b", bucket));
      WriteFlatCheckpoint(dir, "t", numels, world, bucket, flat);
      auto r = CheckpointReader::Open(dir);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE((*r)->VerifyFileChecksums().ok());
      for (int64_t begin : {0, 3, 40, 82}) {
        for (int64_t n : {0, 1, 9}) {
          if (begin + n > 83) continue;
          std::vector<float> got(n);
          ASSERT_TRUE((*r)->ReadFlat(kMasterArray, begin, n, got.data()).ok());
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(got[i], flat[begin + i]) << world << " " << bucket;
        }
      }
      auto p3 = (*r)->ReadParam(3);
      ASSERT_TRUE(p3.ok());
      EXPECT_EQ((*p3)[44], flat[82]);
    }
  }
}

TEST(CheckpointReader, ErrorsNameTheFileAndProblem) {
  const std::vector<float> flat(40, 1.0f);
  const std::string dir = TempDir("reader_errors");
  WriteFlatCheckpoint(dir, "t", {40}, 2, 8, flat);
  // Missing shard.
  ASSERT_EQ(std::rename((dir + "/t/rank_1.zts").c_str(), (dir + "/t/away").c_str()), 0);
  auto r = CheckpointReader::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank_1.zts is missing"), std::string::npos) << r.status();
  ASSERT_EQ(std::rename((dir + "/t/away").c_str(), (dir + "/t/rank_1.zts").c_str()), 0);
  // Truncated shard.
  ASSERT_EQ(truncate((dir + "/t/rank_1.zts").c_str(), 50), 0);
  r = CheckpointReader::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
  // No latest.
  auto none = CheckpointReader::Open(dir + "/nowhere");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

// What a load checks before it overwrites anything: each state-holding file has the arrays it
// will read, fp32 and long enough, whatever its checksums say (they match: the files are whole).
TEST(CheckpointReader, StateArraysAreCheckedBeforeAnyRead) {
  const std::vector<float> flat(40, 1.0f);
  const std::string dir = TempDir("reader_state_arrays");
  WriteFlatCheckpoint(dir, "t", {40}, 2, 8, flat);
  auto r = CheckpointReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->VerifyFileChecksums().ok());
  EXPECT_TRUE((*r)->CheckStateArrays({kMasterArray}).ok());
  const absl::Status missing = (*r)->CheckStateArrays({kMasterArray, "exp_avg"});
  EXPECT_EQ(missing.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(missing.message().find("rank_0.zts: array 'exp_avg' is missing"), std::string::npos)
      << missing;
  // A master one element short of the layout's shard.
  const std::vector<float> shard((*r)->layout().shard_numel() - 1, 0.0f);
  ShardFileWriter w(32);
  ASSERT_TRUE(w.Add(kMasterArray, ArrayDType::kFloat32, shard.data(), shard.size()).ok());
  const std::string short_dir = TempDir("reader_short_master");
  WriteFlatCheckpoint(short_dir, "t", {40}, 2, 8, flat);
  auto written = w.Write(short_dir + "/t/" + ShardFileName(1));
  ASSERT_TRUE(written.ok()) << written.status();
  auto manifest = ReadManifest(short_dir + "/t/" + kManifestFileName);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  manifest->mutable_files(1)->set_size(written->size);
  manifest->mutable_files(1)->set_crc32c(written->crc32c);
  ASSERT_TRUE(WriteManifest(short_dir + "/t/" + kManifestFileName, *manifest).ok());
  auto short_reader = CheckpointReader::Open(short_dir);
  ASSERT_TRUE(short_reader.ok()) << short_reader.status();
  EXPECT_TRUE((*short_reader)->VerifyFileChecksums().ok());
  const absl::Status short_master = (*short_reader)->CheckStateArrays({kMasterArray});
  EXPECT_EQ(short_master.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(short_master.message().find(
                absl::StrCat("rank_1.zts: array 'master' is fp32 of ", shard.size(), " elements")),
            std::string::npos)
      << short_master;
}

TEST(Manifest, NewerFormatIsRefusedClearly) {
  Manifest m;
  m.set_tag("x");
  std::string bytes = EncodeManifest(m);
  auto ok = DecodeManifest(bytes, "m");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->format_version(), kManifestFormatVersion);
  bytes[8] = static_cast<char>(kManifestFormatVersion + 1);
  auto newer = DecodeManifest(bytes, "dir/manifest.ztm");
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find(absl::StrCat("dir/manifest.ztm: format version ",
                                                       kManifestFormatVersion + 1, " is newer")),
            std::string::npos)
      << newer.status();
}

}  // namespace
}  // namespace zerotrain::checkpoint
