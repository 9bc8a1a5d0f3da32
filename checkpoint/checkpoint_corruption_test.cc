// Randomized corruption: a small two-rank checkpoint written with the format library, then
// thousands of cases that flip random bits or truncate one of its files (manifest, either shard,
// `latest`) and read everything back through CheckpointReader. Every case must end in an error or
// in data identical to what was written: never a crash, a hang or different numbers.
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "gtest/gtest.h"

namespace zerotrain::checkpoint {
namespace {

struct Written {
  std::map<std::string, std::string> files;  // path -> pristine bytes
  std::vector<float> master, exp_avg;        // flat, unpadded
  std::vector<std::string> rng;              // per rank
};

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

Written WriteSmallCheckpoint(const std::string& dir) {
  Written w;
  const std::vector<int64_t> numels = {13, 40, 1, 9};
  const int world = 2;
  const int64_t bucket = 10;
  auto layout = partition::ShardLayout::Create(numels, world, bucket);
  EXPECT_TRUE(layout.ok());
  for (int64_t i = 0; i < layout->numel(); ++i) {
    w.master.push_back(0.5f * i - 7);
    w.exp_avg.push_back(1e-3f * i);
  }
  std::filesystem::create_directories(dir + "/t");
  Manifest m;
  m.set_tag("t");
  m.set_world_size(world);
  m.set_layout_world_size(world);
  m.set_bucket_numel(bucket);
  m.add_state_arrays("exp_avg");
  (*m.mutable_client_state())["sampler"] = "12";
  for (size_t i = 0; i < numels.size(); ++i) {
    ParameterEntry* p = m.add_params();
    p->set_name(absl::StrCat("layer", i, ".weight"));
    p->add_shape(numels[i]);
    p->set_numel(numels[i]);
    p->set_dtype("Float");
  }
  for (int r = 0; r < world; ++r) {
    std::vector<float> master(layout->shard_numel()), exp_avg(layout->shard_numel());
    for (size_t k = 0; k < layout->buckets().size(); ++k) {
      const auto& b = layout->buckets()[k];
      for (int64_t j = 0; j < b.slice; ++j) {
        const int64_t idx = layout->OwnedBegin(static_cast<int>(k), r) + j;
        if (idx >= layout->numel()) continue;
        master[b.shard_offset + j] = w.master[idx];
        exp_avg[b.shard_offset + j] = w.exp_avg[idx];
      }
    }
    w.rng.push_back(absl::StrCat("rng state of rank ", r));
    ShardFileWriter writer(/*chunk_bytes=*/24);
    EXPECT_TRUE(writer.Add(kMasterArray, ArrayDType::kFloat32, master.data(), master.size()).ok());
    EXPECT_TRUE(writer.Add("exp_avg", ArrayDType::kFloat32, exp_avg.data(), exp_avg.size()).ok());
    EXPECT_TRUE(writer.Add(kRngArray, ArrayDType::kBytes, w.rng[r].data(), w.rng[r].size()).ok());
    auto f = writer.Write(dir + "/t/" + ShardFileName(r));
    EXPECT_TRUE(f.ok());
    ShardFileEntry* e = m.add_files();
    e->set_name(ShardFileName(r));
    e->set_rank(r);
    e->set_size(f->size);
    e->set_crc32c(f->crc32c);
    e->set_holds_state(true);
  }
  EXPECT_TRUE(WriteManifest(dir + "/t/" + kManifestFileName, m).ok());
  EXPECT_TRUE(WriteLatest(dir, "t").ok());
  for (const std::string& name : {std::string("latest"), std::string("t/") + kManifestFileName,
                                  "t/" + ShardFileName(0), "t/" + ShardFileName(1)}) {
    w.files[dir + "/" + name] = *ReadWholeFile(dir + "/" + name);
  }
  return w;
}

// OK only when everything read equals what was written.
absl::Status ReadEverything(const std::string& dir, const Written& w) {
  auto reader = CheckpointReader::Open(dir);
  if (!reader.ok()) return reader.status();
  const int64_t n = static_cast<int64_t>(w.master.size());
  std::vector<float> master(n), exp_avg(n);
  absl::Status s = (*reader)->ReadFlat(kMasterArray, 0, n, master.data());
  if (s.ok()) s = (*reader)->ReadFlat("exp_avg", 0, n, exp_avg.data());
  if (!s.ok()) return s;
  if (master != w.master || exp_avg != w.exp_avg) return absl::InternalError("SILENT GARBAGE");
  for (int r = 0; r < 2; ++r) {
    auto rng = (*reader)->ReadRankBytes(r, kRngArray);
    if (!rng.ok()) return rng.status();
    if (std::string(rng->begin(), rng->end()) != w.rng[r])
      return absl::InternalError("SILENT GARBAGE");
  }
  if ((*reader)->manifest().client_state().at("sampler") != "12") {
    return absl::InternalError("SILENT GARBAGE");
  }
  return absl::OkStatus();
}

TEST(Corruption, EveryFlipOrTruncationIsCaught) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp", "/corruption");
  std::filesystem::remove_all(dir);
  const Written w = WriteSmallCheckpoint(dir);
  ASSERT_TRUE(ReadEverything(dir, w).ok()) << ReadEverything(dir, w);
  std::mt19937_64 rng(20261130);
  std::vector<std::string> paths;
  for (const auto& [path, bytes] : w.files) paths.push_back(path);
  int errors = 0, identical = 0;
  for (int c = 0; c < 4000; ++c) {
    const std::string& path = paths[rng() % paths.size()];
    std::string bytes = w.files.at(path);
    std::string what;
    if (c % 2 == 0) {
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k) {
        const size_t at = rng() % bytes.size();
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
        what += absl::StrCat(" flip@", at);
      }
    } else {
      bytes.resize(rng() % bytes.size());
      what = absl::StrCat(" truncate to ", bytes.size());
    }
    WriteFile(path, bytes);
    const absl::Status s = ReadEverything(dir, w);
    ASSERT_NE(s.message(), "SILENT GARBAGE") << path << what;
    // Only `latest` has slack: its trailing newline may go (the tag still reads the same).
    const bool is_latest = path.size() >= 7 && path.substr(path.size() - 7) == "/latest";
    ASSERT_FALSE(s.ok() && !is_latest) << "corruption not noticed: " << path << what;
    if (s.ok()) {
      ++identical;
    } else {
      ++errors;
      ASSERT_FALSE(s.message().empty());
    }
    WriteFile(path, w.files.at(path));
  }
  EXPECT_GT(errors, 3500) << identical << " cases read identical data";
  ASSERT_TRUE(ReadEverything(dir, w).ok());
}

}  // namespace
}  // namespace zerotrain::checkpoint
