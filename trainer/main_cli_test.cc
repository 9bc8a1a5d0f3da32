// The command lines of //trainer:main, //checkpoint:consolidate and //trainer/advisor:advisor end
// to end, as a new user types them: both flag forms, --help from the flags' own help strings, and
// one line with exit code 2 for every bad command line, bad config and misplaced file.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/trainer_process.h"
#include "trainer/main_runner.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;
using testing::Dir;
using testing::WriteConfig;
using zerotrain::testing::TrainerResult;

std::string g_consolidate, g_advisor;  // argv[2], argv[3]

TrainerResult RunBinary(const std::string& binary, const std::vector<std::string>& flags,
                        const std::string& dir) {
  zerotrain::testing::TrainerRun run;
  run.binary = binary;
  run.flags = flags;
  run.dir = dir;
  return zerotrain::testing::RunTrainer(run);
}

// Exit 2, exactly one line on stderr holding `needle`, nothing on stdout.
void ExpectOneLine(const TrainerResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(MainCliTest, FlagsTakeBothFormsAndHelpComesFromTheirHelpStrings) {
  const std::string dir = Dir("cli_forms");
  const std::string config = WriteConfig(dir, dir + "/out", 3);
  const TrainerResult spaced =
      RunBinary(testing::MainBinary(), {"--config", config, "--print_config"}, dir);
  EXPECT_EQ(spaced.exit_code, 0) << spaced.err;
  EXPECT_NE(spaced.out.find("steps: 3"), std::string::npos) << spaced.out;
  const TrainerResult help = RunBinary(testing::MainBinary(), {"--help"}, dir);
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(
      help.out.find("  --config\n      run config, protobuf text (trainer/config/config.proto"),
      std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("  --max_new_tokens=100\n      --generate: tokens to add"),
            std::string::npos)
      << help.out;
  const TrainerResult advisor_help = RunBinary(g_advisor, {"--help"}, dir);
  EXPECT_EQ(advisor_help.exit_code, 0) << advisor_help.err;
  EXPECT_NE(advisor_help.out.find("  --largest_layer_params\n"), std::string::npos)
      << advisor_help.out;
  const TrainerResult consolidate_help = RunBinary(g_consolidate, {"-h"}, dir);
  EXPECT_EQ(consolidate_help.exit_code, 0) << consolidate_help.err;
  EXPECT_NE(consolidate_help.out.find("  --checkpoint_dir\n"), std::string::npos)
      << consolidate_help.out;
}

TEST(MainCliTest, BadCommandLinesAreOneLineAndExit2) {
  const std::string dir = Dir("cli_bad");
  const std::string config = WriteConfig(dir, dir + "/out", 3);
  const std::string main = testing::MainBinary();
  ExpectOneLine(RunBinary(main, {"--config=" + config, "--prompt=x"}, dir),
                "--prompt needs --generate");
  ExpectOneLine(
      RunBinary(main, {"--config=" + config, "--print_config", "--export_hf=" + dir + "/hf"}, dir),
      "--print_config prints the config and exits: give it alone");
  ExpectOneLine(
      RunBinary(main, {"--config=" + config, "--generate", "--export_hf=" + dir + "/hf"}, dir),
      "--generate and --export_hf are two runs");
  ExpectOneLine(RunBinary(main, {"--estimate_memory", "--params=13B"}, dir),
                "--params and --largest_layer_params go together");
  ExpectOneLine(RunBinary(main, {"--config"}, dir), "flag --config needs a value");
  ExpectOneLine(RunBinary(main, {"--nproc_per_node=two"}, dir),
                "flag --nproc_per_node has a bad value");
  ExpectOneLine(RunBinary(g_advisor, {"--params=1B", "--bogus=1"}, dir), "unknown flag --bogus");
  ExpectOneLine(RunBinary(g_advisor, {"--params=1B"}, dir), "--largest_layer_params: required");
  ExpectOneLine(RunBinary(g_consolidate,
                          {"--checkpoint_dir", dir + "/nothing", "--output", dir + "/m.pt"}, dir),
                "no checkpoint in " + dir + "/nothing");
  EXPECT_FALSE(fs::exists(dir + "/out"));
  EXPECT_FALSE(fs::exists(dir + "/hf"));
}

TEST(MainCliTest, ConfigMistakesSayWhatWasMeant) {
  const std::string dir = Dir("cli_config");
  const std::string main = testing::MainBinary();
  const std::string typo = WriteConfig(
      dir, dir + "/out", 3, {{"zero", "zero_optimization { stage: 2 overlap_com: true }"}});
  ExpectOneLine(RunBinary(main, {"--config=" + typo}, dir),
                "zero_optimization.overlap_com: unknown field (did you mean overlap_comm?)");
  std::ofstream(dir + "/ds.json") << "{\"train_micro_batch_size_per_gpu\": 4}\n";
  ExpectOneLine(RunBinary(main, {"--config=" + dir + "/ds.json"}, dir),
                "(this is JSON: a DeepSpeed ds_config.json goes to --ds_config)");
  ExpectOneLine(RunBinary(main, {"--ds_config=" + WriteConfig(dir, dir + "/out", 3)}, dir),
                "(this is a protobuf text config: pass it with --config)");
  std::ofstream(dir + "/a_file") << "x\n";
  ExpectOneLine(RunBinary(main,
                          {"--config=" + WriteConfig(dir, dir + "/out", 3),
                           "--export_hf=" + dir + "/a_file/hf"},
                          dir),
                "--export_hf = \"" + dir + "/a_file/hf\": ");
}

// Names and counts as a person writes them: model.name as given, "1 rank".
TEST(MainCliTest, OneRankAndTheModelNameAreEchoedAsWritten) {
  const std::string dir = Dir("cli_echo");
  const TrainerResult r =
      RunBinary(testing::MainBinary(),
                {"--nproc_per_node=1",
                 "--config=" + WriteConfig(dir, dir + "/out", 1,
                                           {{"model",
                                             "model { name: \"gpt\" n_layer: 1 "
                                             "n_head: 2 n_embd: 32 block_size: 16 }"}})},
                dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(", 1 rank ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" x 1 rank; "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("1 ranks"), std::string::npos) << r.out;
  const TrainerResult bad =
      RunBinary(testing::MainBinary(),
                {"--config=" + WriteConfig(dir, dir + "/out2", 1,
                                           {{"model", "model { name: \"gpt\" n_kv_head: 2 }"}})},
                dir);
  ExpectOneLine(bad, "model.n_kv_head does not apply to model.name \"gpt\"");
}

// --generate and --export_hf train nothing, so they take a config without batch sizes; a run's
// output directory given to consolidate points at its checkpoints.
TEST(MainCliTest, ModelToolsNeedNoBatchSizesAndConsolidatePointsAtCheckpoints) {
  const std::string dir = Dir("cli_tools");
  const std::string main = testing::MainBinary();
  const std::string out = dir + "/out";
  const TrainerResult trained = RunBinary(
      main,
      {"--config=" + WriteConfig(dir, out, 2,
                                 {{"run", "run { steps: 2 save_interval: 2 seed: 1 output_dir: \"" +
                                              out + "\" eval_interval: 0 sample_tokens: 0 }"}})},
      dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  // Resuming it with another model size is refused before any rank starts, once.
  const TrainerResult bigger =
      RunBinary(main,
                {"--config=" +
                 WriteConfig(dir, dir + "/out2", 4,
                             {{"model",
                               "model { name: \"gpt\" n_layer: 3 n_head: 2 n_embd: 64 "
                               "block_size: 32 }"},
                              {"run", "run { steps: 4 seed: 1 output_dir: \"" + dir +
                                          "/out2\" resume_from: \"" + out + "/checkpoints\" }"}})},
                dir);
  ExpectOneLine(bigger, "the checkpoint holds a model of ");
  EXPECT_NE(bigger.err.find("(model.name \"gpt\", n_layer 3, n_embd 64"), std::string::npos)
      << bigger.err;
  EXPECT_FALSE(fs::exists(dir + "/out2"));
  const TrainerResult wrong_dir =
      RunBinary(g_consolidate, {"--checkpoint_dir=" + out, "--output=" + dir + "/m.pt"}, dir);
  ExpectOneLine(wrong_dir,
                "it is a run's output directory: its checkpoints are in " + out + "/checkpoints");
  const std::string no_batch = dir + "/no_batch.pbtxt";
  std::ofstream(no_batch)
      << "model { name: \"gpt\" n_layer: 2 n_head: 2 n_embd: 64 block_size: 32 }\n"
      << "run { resume_from: \"" << out << "/checkpoints\" }\n";
  const TrainerResult generated = RunBinary(
      main, {"--config=" + no_batch, "--generate", "--prompt_tokens=1,2", "--max_new_tokens=3"},
      dir);
  EXPECT_EQ(generated.exit_code, 0) << generated.err;
  EXPECT_NE(generated.out.find("zerotrain: gpt model"), std::string::npos) << generated.out;
  const TrainerResult exported =
      RunBinary(main, {"--config=" + no_batch, "--export_hf", dir + "/hf"}, dir);
  EXPECT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_TRUE(fs::exists(dir + "/hf/config.json"));
}

}  // namespace
}  // namespace zerotrain::trainer

int main(int argc, char** argv) {
  if (!zerotrain::trainer::testing::StartCpuTests(&argc, argv, 3,
                                                  "main_cli_test <main> <consolidate> <advisor>")) {
    return 2;
  }
  zerotrain::trainer::g_consolidate = argv[2];
  zerotrain::trainer::g_advisor = argv[3];
  return RUN_ALL_TESTS();
}
