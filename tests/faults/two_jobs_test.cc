// Two jobs started at the same moment on one machine, neither given a port (docs/RELIABILITY.md):
// each must train alone, to the losses it trains with the machine to itself. Jobs that met in
// one rendezvous would mix ranks, fail or train on each other's gradients.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_run.h"
#include "tests/trainer_process.h"

namespace {

using zerotrain::faults::FreshDir;
using zerotrain::faults::StraightLosses;
using zerotrain::faults::WriteConfig;
using zerotrain::testing::CsvLosses;
using zerotrain::testing::TrainerRun;

TEST(TwoJobsTest, JobsStartedTogetherNeverMeet) {
  const auto& straight = StraightLosses(1);
  ASSERT_FALSE(straight.empty());
  // A few rounds: two jobs on one fixed port met in about two of three tries.
  for (int round = 0; round < 3; ++round) {
    std::vector<TrainerRun> runs(2);
    std::vector<pid_t> pids;
    for (int job = 0; job < 2; ++job) {
      const std::string dir = FreshDir(absl::StrCat("round", round, "_job", job));
      runs[job].binary = zerotrain::faults::TrainerBinary();
      runs[job].flags = {"--config=" + WriteConfig(dir, dir + "/out", 1)};
      runs[job].dir = dir;
      pids.push_back(zerotrain::testing::StartTrainer(runs[job]));
    }
    for (int job = 0; job < 2; ++job) {
      SCOPED_TRACE(absl::StrCat("round ", round, ", job ", job));
      const auto r = zerotrain::testing::WaitTrainer(pids[job], runs[job]);
      EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_EQ(CsvLosses(runs[job].dir + "/out/t/metrics.csv"), straight);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: two_jobs_test <//trainer:main>\n");
    return 2;
  }
  zerotrain::faults::SetTrainerBinary(argv[1]);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  return RUN_ALL_TESTS();
}
