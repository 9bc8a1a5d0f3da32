// PruneTags (tag_retention.h) on the real filesystem: it keeps the newest tags and the one
// `latest` names (even when older), removes only directories that are checkpoint tags, and keeps
// everything for keep_last 0 or without a readable `latest`.
#include "checkpoint/tag_retention.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "gtest/gtest.h"

namespace zerotrain::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base ? base : "/tmp", "/tag_retention/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A tag directory with a manifest that names it, committed `age` seconds ago (older = larger).
void MakeTag(const std::string& dir, const std::string& tag, int64_t step, int age) {
  fs::create_directories(dir + "/" + tag);
  Manifest m;
  m.set_tag(tag);
  m.set_optimizer_steps(step);
  const std::string path = absl::StrCat(dir, "/", tag, "/", kManifestFileName);
  ASSERT_TRUE(WriteManifest(path, m).ok());
  std::ofstream(dir + "/" + tag + "/rank_0.zts") << "shard";
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(age));
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Five tags saved in the order a, b, c, d, e (names and steps deliberately out of that order),
// `latest` on `latest`, and two directories that are not checkpoint tags.
std::string FiveTags(const std::string& name, const std::string& latest) {
  const std::string dir = TempDir(name);
  MakeTag(dir, "a", 50, 50);
  MakeTag(dir, "b", 40, 40);
  MakeTag(dir, "c", 10, 30);
  MakeTag(dir, "d", 20, 20);
  MakeTag(dir, "e", 5, 10);
  fs::create_directories(dir + "/partial");  // a killed save: no manifest
  std::ofstream(dir + "/partial/rank_0.zts") << "shard";
  fs::create_directories(dir + "/foreign");  // a manifest that names another tag
  Manifest m;
  m.set_tag("a");
  EXPECT_TRUE(WriteManifest(dir + "/foreign/" + kManifestFileName, m).ok());
  EXPECT_TRUE(WriteLatest(dir, latest).ok());
  return dir;
}

TEST(PruneTags, KeepsTheNewestAndLatest) {
  const std::string dir = FiveTags("newest", "e");
  auto removed = PruneTags(dir, 2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(std::set<std::string>(removed->begin(), removed->end()),
            (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"d", "e", "latest", "partial", "foreign"}));
}

TEST(PruneTags, NeverRemovesTheTagLatestNames) {
  const std::string dir = FiveTags("latest_old", "a");  // `latest` on the oldest save
  auto removed = PruneTags(dir, 2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"a", "e", "latest", "partial", "foreign"}));
  removed = PruneTags(dir, 1);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"a", "latest", "partial", "foreign"}));
}

TEST(PruneTags, EqualTimesFallBackToSteps) {
  const std::string dir = TempDir("same_time");
  for (int step : {9, 10, 11}) MakeTag(dir, DefaultTag(step), step, 5);
  ASSERT_TRUE(WriteLatest(dir, DefaultTag(11)).ok());
  auto removed = PruneTags(dir, 2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, std::vector<std::string>{"global_step9"});
}

TEST(PruneTags, KeepsEverythingForZeroOrWithoutLatest) {
  const std::string dir = FiveTags("keep_all", "e");
  auto removed = PruneTags(dir, 0);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
  fs::remove(dir + "/latest");
  removed = PruneTags(dir, 1);
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kNotFound) << removed.status();
  EXPECT_EQ(Entries(dir).size(), 7u);
}

}  // namespace
}  // namespace zerotrain::checkpoint
