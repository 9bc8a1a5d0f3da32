// Checkpoint identity under the Engine, over 2 real ranks: shard files copied into the wrong
// place (the ranks' files swapped, an older step's file, another run's file, an older manifest)
// fail LoadCheckpoint on every rank with an error naming the file, what it records and what the
// manifest expects; the run id is one per engine and the same on both ranks; and
// keep_last_checkpoints prunes old tags while orphan temporaries go at the next save. The
// expected words are built from what the engines report (run ids, steps), not copied from
// output.
#include <torch/types.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

namespace fs = std::filesystem;

std::string TestDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return absl::StrCat(base ? base : "/tmp", "/identity/", name);
}

struct Net : torch::nn::Module {
  Net() {
    torch::manual_seed(0);
    a = register_module("fc1", torch::nn::Linear(4, 6));
    b = register_module("fc2", torch::nn::Linear(6, 3));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

EngineOptions Options(int64_t keep_last = 0) {
  EngineOptions o;
  o.stage = 1;
  o.train_batch_size = 4;
  o.reduce_bucket_size = 8;
  o.keep_last_checkpoints = keep_last;
  return o;
}

absl::Status Step(Engine& e, Net& net) {
  ZT_RETURN_IF_ERROR(e.Backward(net.b(torch::tanh(net.a(torch::ones({2, 4})))).pow(2).mean()));
  return e.Step();
}

absl::Status Expect(const absl::Status& s, const std::vector<std::string>& words,
                    const std::string& what) {
  if (s.ok()) return absl::InternalError(absl::StrCat(what, ": loaded without an error"));
  for (const std::string& w : words) {
    if (s.message().find(w) == std::string::npos) {
      return absl::InternalError(absl::StrCat(what, ": error lacks '", w, "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::string RunText(uint64_t id) { return absl::StrFormat("run 0x%016x", id); }

// A copy of <base> under <name>; rank 0 only.
std::string Variant(const std::string& base, const std::string& name) {
  const std::string dir = TestDir(name);
  fs::copy(base, dir, fs::copy_options::recursive);
  return dir;
}

// Saves global_step1 and global_step2 from one engine, and global_step2 from a second engine (a
// second run), then loads misplaced copies.
absl::StatusOr<std::string> MisplacedFiles() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const int rank = group->rank();
  const std::string base = TestDir("base"), other = TestDir("other");
  Net net, net2;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(net, Options(), group.get()));
  ZT_ASSIGN_OR_RETURN(auto engine2, Engine::Create(net2, Options(), group.get()));
  const uint64_t id = engine->run_id(), id2 = engine2->run_id();
  if (id == 0 || id == id2) {
    return absl::InternalError(absl::StrCat("run ids ", id, " and ", id2, ": not two runs"));
  }
  for (int step = 1; step <= 2; ++step) {
    ZT_RETURN_IF_ERROR(Step(*engine, net));
    ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(base));
    ZT_RETURN_IF_ERROR(Step(*engine2, net2));
    ZT_RETURN_IF_ERROR(engine2->SaveCheckpoint(other));
  }
  // Both ranks wrote rank 0's run id: the manifest's, which every file must record.
  ZT_ASSIGN_OR_RETURN(auto reader, checkpoint::CheckpointReader::Open(base));
  if (reader->manifest().run_id() != id) {
    return absl::InternalError(absl::StrCat("manifest run id ", reader->manifest().run_id(),
                                            ", rank ", rank, "'s engine has ", id));
  }
  if (rank == 0) {
    const std::string s = Variant(base, "swapped") + "/global_step2/";
    fs::rename(s + "rank_0.zts", s + "x");
    fs::rename(s + "rank_1.zts", s + "rank_0.zts");
    fs::rename(s + "x", s + "rank_1.zts");
    const auto overwrite = fs::copy_options::overwrite_existing;
    fs::copy_file(base + "/global_step1/rank_1.zts",
                  Variant(base, "stale") + "/global_step2/rank_1.zts", overwrite);
    fs::copy_file(other + "/global_step2/rank_1.zts",
                  Variant(base, "other_run") + "/global_step2/rank_1.zts", overwrite);
    fs::copy_file(base + "/global_step1/manifest.ztm",
                  Variant(base, "old_manifest") + "/global_step2/manifest.ztm", overwrite);
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  // Every rank checks every file's identity, so each names the file itself.
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(TestDir("swapped")).status(),
                            {"swapped/global_step2/rank_0.zts: records rank 1 of " + RunText(id),
                             "the manifest expects rank 0 of " + RunText(id) + " step 2"},
                            "swapped shards"));
  ZT_RETURN_IF_ERROR(
      Expect(engine->LoadCheckpoint(TestDir("stale")).status(),
             {"stale/global_step2/rank_1.zts: records rank 1 of " + RunText(id) +
                  " step 1 (tag global_step1",
              "the manifest expects rank 1 of " + RunText(id) + " step 2 (tag global_step2"},
             "older step's shard"));
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(TestDir("other_run")).status(),
                            {"other_run/global_step2/rank_1.zts: records rank 1 of " + RunText(id2),
                             "the manifest expects rank 1 of " + RunText(id)},
                            "another run's shard"));
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(TestDir("old_manifest")).status(),
                            {"old_manifest/global_step2/manifest.ztm: records tag global_step1",
                             "tag directory global_step2", "old_manifest/latest names"},
                            "older manifest"));
  // The failed loads changed nothing; the real checkpoint loads and trains on.
  ZT_RETURN_IF_ERROR(engine->LoadCheckpoint(base).status());
  ZT_RETURN_IF_ERROR(Step(*engine, net));
  return std::string("ok");
}

TEST(EngineCheckpointIdentity, MisplacedFilesFailNamingTheFile) {
  fs::remove_all(TestDir(""));
  auto outcomes = zerotrain::testing::SpawnRanks(2, [](int) { return MisplacedFiles(); });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// keep_last_checkpoints 2 over five saves: the two newest tags stay, with `latest`, and what is
// not a checkpoint tag stays too. A killed save's temporaries are gone after the next save.
absl::StatusOr<std::string> Pruning() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const int rank = group->rank();
  const std::string dir = TestDir("pruned");
  Net net;
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(net, Options(/*keep_last=*/2), group.get()));
  if (rank == 0) {
    fs::create_directories(dir + "/notes");
    std::ofstream(dir + "/notes/manifest.ztm") << "not a manifest";
    fs::create_directories(dir + "/global_step0");  // a killed save's tag: no manifest
    std::ofstream(dir + "/global_step0/rank_0.zts") << "partial";
  }
  for (int step = 1; step <= 5; ++step) {
    ZT_RETURN_IF_ERROR(Step(*engine, net));
    if (step == 5 && rank == 0) {
      // What a save killed mid-write leaves, and a file of the same pattern that is not ours.
      std::ofstream(dir + "/global_step4/rank_1.zts.tmp.4242.3") << "orphan";
      std::ofstream(dir + "/global_step0/manifest.ztm.tmp.4242.4") << "orphan";
      std::ofstream(dir + "/latest.tmp.4242.5") << "orphan";
      std::ofstream(dir + "/notes/data.tmp.4242.6") << "someone else's";
    }
    ZT_RETURN_IF_ERROR(group->Barrier());
    ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(dir));
    if (rank != 0) continue;
    std::set<std::string> want = {"latest", "notes", "global_step0", checkpoint::DefaultTag(step)};
    if (step > 1) want.insert(checkpoint::DefaultTag(step - 1));
    if (Entries(dir) != want) {
      std::string got;
      for (const std::string& n : Entries(dir)) absl::StrAppend(&got, n, " ");
      return absl::InternalError(absl::StrCat("after save ", step, ": ", dir, " holds ", got));
    }
  }
  if (rank == 0) {
    const std::set<std::string> step4 = Entries(dir + "/global_step4");
    const std::set<std::string> step0 = Entries(dir + "/global_step0");
    const std::set<std::string> notes = Entries(dir + "/notes");
    if (step4.count("rank_1.zts.tmp.4242.3") || step0.count("manifest.ztm.tmp.4242.4") ||
        Entries(dir).count("latest.tmp.4242.5")) {
      return absl::InternalError("an orphan temporary survived the next save");
    }
    if (!notes.count("data.tmp.4242.6") || !step0.count("rank_0.zts")) {
      return absl::InternalError("the save removed a file that is not a checkpoint temporary");
    }
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  ZT_RETURN_IF_ERROR(engine->LoadCheckpoint(dir).status());
  return std::string("ok");
}

TEST(EngineCheckpointIdentity, KeepLastCheckpointsPrunesOldTags) {
  fs::remove_all(TestDir("pruned"));
  auto outcomes = zerotrain::testing::SpawnRanks(2, [](int) { return Pruning(); });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

}  // namespace
}  // namespace zerotrain::engine
