// The run the fault-injection suite trains, breaks and resumes (fault_run.h).
#include "tests/faults/fault_run.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zerotrain::faults {
namespace {
std::string& Binary() {
  static std::string binary;
  return binary;
}
}  // namespace

void SetTrainerBinary(const std::string& path) { Binary() = path; }
const std::string& TrainerBinary() { return Binary(); }

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string WriteConfig(const std::string& dir, const std::string& out_dir, int stage,
                        const std::string& resume_from, int steps) {
  const std::string path = dir + "/run.pbtxt";
  std::ofstream(path) << "train_micro_batch_size_per_gpu: 4\n"
                      << "zero_optimization { stage: " << stage << " reduce_bucket_size: 20000 }\n"
                      << "bf16 { enabled: true }\n"
                      << "optimizer { type: \"AdamW\" params { lr: 3e-3 } }\n"
                      << "csv_monitor { enabled: true job_name: \"t\" }\n"
                      << "model { name: \"gpt\" n_layer: 2 n_head: 2 n_embd: 64 block_size: 32 }\n"
                      << "run { steps: " << steps << " seed: 1 output_dir: \"" << out_dir
                      << "\" eval_interval: 0 eval_iters: 2 sample_tokens: 0 save_interval: 2"
                      << " resume_from: \"" << resume_from << "\" }\n";
  return path;
}

zerotrain::testing::TrainerResult Train(const std::string& dir, const std::string& config,
                                        std::function<void(pid_t)> during) {
  zerotrain::testing::TrainerRun run;
  run.binary = TrainerBinary();
  run.flags = {"--config=" + config};
  run.dir = dir;
  run.during = std::move(during);
  return zerotrain::testing::RunTrainer(run);
}

const std::map<int64_t, std::string>& StraightLosses(int stage) {
  static std::map<int, std::map<int64_t, std::string>> runs;
  if (runs.count(stage) == 0) {
    const std::string dir = FreshDir(absl::StrCat("straight", stage));
    const auto r = Train(dir, WriteConfig(dir, dir + "/out", stage));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    runs[stage] = zerotrain::testing::CsvLosses(dir + "/out/t/metrics.csv");
    EXPECT_EQ(runs[stage].size(), static_cast<size_t>(kSteps));
  }
  return runs[stage];
}

}  // namespace zerotrain::faults
