// A stop that was asked for saves: SIGTERM or SIGUSR1 (a batch system's warning before it
// preempts) makes every rank finish its step, save a checkpoint at that step and exit 3, the last
// line saying so and where to continue from; the resume ends with the uninterrupted run's losses,
// bit for bit. With run.save_on_stop false nothing is saved, and the line says so.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/trainer_process.h"
#include "trainer/main_runner.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;
using testing::Dir;
using testing::Read;
using testing::Result;
using testing::RunMain;
using testing::WriteConfig;

std::map<std::string, std::string> RunEntries(const std::string& out, int64_t steps,
                                              const std::string& more) {
  return {{"run", absl::StrCat("run { steps: ", steps, " seed: 1 output_dir: \"", out,
                               "\" eval_interval: 0 eval_iters: 1 sample_tokens: 0 ", more, " }")},
          {"print", "steps_per_print: 1"}};
}

// Runs 100000 steps and sends `signo` to the launcher once step 3 is in metrics.csv.
Result StopMidRun(const std::string& dir, const std::string& out, int signo,
                  const std::string& more = "") {
  return RunMain(
      {"--config=" + WriteConfig(dir, out, 0, RunEntries(out, 100000, more))}, dir,
      [&](pid_t launcher) {
        for (int i = 0;
             i < 2400 && zerotrain::testing::CsvLosses(out + "/t/metrics.csv").size() < 3; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
        kill(launcher, signo);
      });
}

// The step the ranks stopped after, from rank 0's line.
int64_t StoppedStep(const std::string& err) {
  const size_t at = err.find("stopped after step ");
  int64_t step = -1;
  if (at == std::string::npos) return step;
  const size_t from = at + std::string("stopped after step ").size();
  (void)absl::SimpleAtoi(err.substr(from, err.find(' ', from) - from), &step);
  return step;
}

std::string LastLine(const std::string& text) {
  const size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - start);
}

TEST(StopSaveTest, SigtermSavesAtTheStepItStoppedAndTheResumeMatchesAStraightRun) {
  for (const int signo : {SIGTERM, SIGUSR1}) {
    SCOPED_TRACE(strsignal(signo));
    const std::string dir = Dir(absl::StrCat("stop_", signo));
    const std::string out = dir + "/out";
    const Result stopped = StopMidRun(dir, out, signo);
    ASSERT_EQ(stopped.exit_code, 3) << stopped.out << stopped.err;
    const int64_t step = StoppedStep(stopped.err);
    ASSERT_GE(step, 3) << stopped.err;
    const std::string tag = absl::StrCat(out, "/checkpoints/global_step", step);
    EXPECT_EQ(Read(out + "/checkpoints/latest"), absl::StrCat("global_step", step, "\n"));
    EXPECT_EQ(LastLine(stopped.err),
              absl::StrCat(
                  "zerotrain: stopped on request (launcher: stopped by signal ", signo, " (",
                  strsignal(signo), "), forwarded to every rank); the newest checkpoint is ", tag,
                  ": continue with run.resume_from: \"auto\" (or \"", out, "/checkpoints\")"));
    EXPECT_EQ(stopped.err.find("error"), std::string::npos) << stopped.err;
    // Continue to step + 3 from it; a straight run of step + 3 steps is the reference.
    const Result resumed =
        RunMain({"--config=" +
                 WriteConfig(dir, out, 0, RunEntries(out, step + 3, "resume_from: \"auto\""))},
                dir);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_NE(resumed.out.find(absl::StrCat("resumed from ", out, "/checkpoints at step ", step)),
              std::string::npos)
        << resumed.out;
    const std::string straight_out = dir + "/straight";
    const Result straight = RunMain(
        {"--config=" + WriteConfig(dir, straight_out, 0, RunEntries(straight_out, step + 3, ""))},
        dir);
    ASSERT_EQ(straight.exit_code, 0) << straight.err;
    EXPECT_EQ(zerotrain::testing::CsvLosses(out + "/t/metrics.csv"),
              zerotrain::testing::CsvLosses(straight_out + "/t/metrics.csv"));
  }
}

TEST(StopSaveTest, SaveOnStopFalseSavesNothingAndSaysSo) {
  const std::string dir = Dir("stop_nosave");
  const Result stopped = StopMidRun(dir, dir + "/out", SIGINT, "save_on_stop: false");
  ASSERT_EQ(stopped.exit_code, 3) << stopped.out << stopped.err;
  EXPECT_FALSE(fs::exists(dir + "/out/checkpoints")) << stopped.err;
  EXPECT_NE(stopped.err.find("run.save_on_stop is false: no checkpoint saved"), std::string::npos)
      << stopped.err;
  EXPECT_NE(LastLine(stopped.err).find("; no checkpoint was saved"), std::string::npos)
      << stopped.err;
}

}  // namespace
}  // namespace zerotrain::trainer

int main(int argc, char** argv) {
  if (!zerotrain::trainer::testing::StartCpuTests(&argc, argv, 1,
                                                  "stop_save_test <path of //trainer:main>"))
    return 2;
  return RUN_ALL_TESTS();
}
