// Valid checkpoint files in the wrong place (docs/RELIABILITY.md): two ranks' shards swapped, an
// older step's shard or manifest copied into a newer tag, a shard of another run, a flipped byte.
// Each must stop the resume and `consolidate` with an error that names the file; none may load.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_run.h"
#include "tests/trainer_process.h"

namespace {

namespace fs = std::filesystem;
using zerotrain::faults::FreshDir;
using zerotrain::faults::Train;
using zerotrain::faults::WriteConfig;
using zerotrain::testing::TrainerResult;

std::string g_consolidate;
constexpr int kStage = 2;  // every rank's shard holds its own part of the optimizer state

// Two runs of the same configuration, each saving global_step2 and global_step4.
class MisplacedCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* name : {"first", "second"}) {
      const std::string dir = FreshDir(name);
      const TrainerResult r = Train(dir, WriteConfig(dir, dir + "/out", kStage, "", 4));
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    }
  }

  static std::string Checkpoints(const std::string& run) {
    return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", run, "/out/checkpoints");
  }

  // A copy of the first run's checkpoints to break.
  std::string Copy() {
    const std::string dir =
        FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::copy(Checkpoints("first"), dir + "/checkpoints", fs::copy_options::recursive);
    return dir + "/checkpoints";
  }

  // Resuming from `checkpoints` must fail, and so must consolidating its latest tag, each naming
  // `file`.
  void ExpectRefused(const std::string& checkpoints, const std::string& file) {
    const std::string dir =
        FreshDir(absl::StrCat(fs::path(checkpoints).parent_path().filename().string(), "_resume"));
    const TrainerResult resumed =
        Train(dir, WriteConfig(dir, dir + "/out", kStage, checkpoints, 6));
    EXPECT_NE(resumed.exit_code, 0) << resumed.out << resumed.err;
    EXPECT_LT(resumed.exit_code, 128) << "crashed rather than refused: " << resumed.err;
    EXPECT_TRUE(absl::StrContains(resumed.err, file)) << "the error does not name " << file << ":\n"
                                                      << resumed.err;
    EXPECT_FALSE(fs::exists(dir + "/out/t/metrics.csv")) << "it trained: " << resumed.out;

    zerotrain::testing::TrainerRun run;
    run.binary = g_consolidate;
    run.flags = {"--checkpoint_dir=" + checkpoints, "--output=" + dir + "/model.pt"};
    run.dir = dir;
    const TrainerResult consolidated = zerotrain::testing::RunTrainer(run);
    EXPECT_NE(consolidated.exit_code, 0) << consolidated.out << consolidated.err;
    EXPECT_TRUE(absl::StrContains(consolidated.err, file))
        << "consolidate does not name " << file << ":\n"
        << consolidated.err;
    EXPECT_FALSE(fs::exists(dir + "/model.pt"));
  }
};

TEST_F(MisplacedCheckpointTest, SwappedRankShards) {
  const std::string ckpt = Copy();
  const std::string tag = ckpt + "/global_step4";
  fs::rename(tag + "/rank_0.zts", tag + "/swap");
  fs::rename(tag + "/rank_1.zts", tag + "/rank_0.zts");
  fs::rename(tag + "/swap", tag + "/rank_1.zts");
  ExpectRefused(ckpt, "global_step4/rank_");
}

TEST_F(MisplacedCheckpointTest, OlderShardInNewerTag) {
  const std::string ckpt = Copy();
  fs::copy_file(ckpt + "/global_step2/rank_1.zts", ckpt + "/global_step4/rank_1.zts",
                fs::copy_options::overwrite_existing);
  ExpectRefused(ckpt, "global_step4/rank_1.zts");
}

TEST_F(MisplacedCheckpointTest, OlderManifestInNewerTag) {
  const std::string ckpt = Copy();
  fs::copy_file(ckpt + "/global_step2/manifest.ztm", ckpt + "/global_step4/manifest.ztm",
                fs::copy_options::overwrite_existing);
  ExpectRefused(ckpt, "global_step4/manifest.ztm");
}

// The second run trained the same configuration: its shard differs from the first run's only in
// whose it is.
TEST_F(MisplacedCheckpointTest, ShardOfAnotherRun) {
  const std::string ckpt = Copy();
  fs::copy_file(Checkpoints("second") + "/global_step4/rank_1.zts",
                ckpt + "/global_step4/rank_1.zts", fs::copy_options::overwrite_existing);
  ExpectRefused(ckpt, "global_step4/rank_1.zts");
}

TEST_F(MisplacedCheckpointTest, FlippedByte) {
  const std::string ckpt = Copy();
  const std::string shard = ckpt + "/global_step4/rank_1.zts";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(fs::file_size(shard) / 2));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
  f.put(static_cast<char>(c ^ 0x10));
  f.close();
  ExpectRefused(ckpt, "global_step4/rank_1.zts");
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: misplaced_checkpoint_test <//trainer:main> <consolidate>\n");
    return 2;
  }
  zerotrain::faults::SetTrainerBinary(argv[1]);
  g_consolidate = argv[2];
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  return RUN_ALL_TESTS();
}
