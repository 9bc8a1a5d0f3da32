// //trainer:main on inputs other than the defaults: the token files users' data preparation
// writes (docs/DATA.md), where llm.c shards of uint32 ids named by a glob train exactly as the
// same ids given as a text file (one token per byte) do; and the Llama family, whose loss falls
// at ZeRO stage 3 with recomputation. (A glob that matches nothing is among main_test's bad
// inputs; Hugging Face weights are tests/hf's.) And text through a SentencePiece model trained
// here with Debian's spm_train: the run learns, its sample and --generate print decoded text, and a
// model.vocab_size smaller than the tokenizer's is one line and exit 2.
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/deepspeed/oracle.h"
#include "trainer/main_runner.h"

namespace zerotrain::trainer::testing {
namespace {

// Byte-level "text" with enough structure for the loss to fall.
std::string Text(size_t n) {
  const std::string words[] = {"the ",  "quick ", "brown ", "fox ",  "jumps ",
                               "over ", "a ",     "lazy ",  "dog.\n"};
  std::string text;
  for (size_t i = 0; text.size() < n; ++i) text += words[(i * 7 + i / 9) % 9];
  text.resize(n);
  return text;
}

// An llm.c shard of uint32 ids (magic 20240801, version 7), the header written field by field.
void WriteLlmcUint32(const std::string& path, const std::string& bytes) {
  std::string out(1024 + 4 * bytes.size(), '\0');
  auto put = [&out](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(0, 20240801);
  put(4, 7);
  put(8, static_cast<uint32_t>(bytes.size()));
  for (size_t i = 0; i < bytes.size(); ++i) put(1024 + 4 * i, static_cast<unsigned char>(bytes[i]));
  std::ofstream(path, std::ios::binary) << out;
}

TEST(MainInputsTest, LlmcShardsByGlobTrainAsTheSameIdsInATextFile) {
  const std::string dir = Dir("shards");
  const std::string text = Text(24000);
  std::ofstream(dir + "/all.txt", std::ios::binary) << text;
  // Three shards, written out of order: the glob's matches are sorted.
  WriteLlmcUint32(dir + "/train_002.bin", text.substr(16000));
  WriteLlmcUint32(dir + "/train_000.bin", text.substr(0, 9000));
  WriteLlmcUint32(dir + "/train_001.bin", text.substr(9000, 7000));

  auto run = [&](const std::string& name, const std::string& data) {
    const std::string run_dir = Dir(name);
    return RunMain({"--config=" + WriteConfig(run_dir, run_dir + "/out", 12, {{"data", data}})},
                   run_dir);
  };
  const Result from_text = run("text", "data { source: \"text\" path: \"" + dir + "/all.txt\" }");
  const Result from_shards =
      run("tokens", "data { source: \"tokens\" path: \"" + dir + "/train_*.bin\" }");
  ASSERT_EQ(from_text.exit_code, 0) << from_text.out << from_text.err;
  ASSERT_EQ(from_shards.exit_code, 0) << from_shards.out << from_shards.err;
  const std::vector<double> want = StepLosses(from_text.out);
  ASSERT_GE(want.size(), 2u) << from_text.out;
  EXPECT_EQ(StepLosses(from_shards.out), want) << from_shards.out;
  EXPECT_LT(want.back(), want.front()) << from_text.out;
}

TEST(MainInputsTest, LlamaLearnsAtStage3WithRecomputation) {
  const std::string dir = Dir("llama");
  const Result r =
      RunMain({"--config=" +
               WriteConfig(dir, dir + "/out", 30,
                           {{"model",
                             "model { name: \"llama\" n_layer: 2 n_head: 4 n_kv_head: 2 n_embd: 64 "
                             "block_size: 32 checkpoint_every: 1 }"},
                            {"zero", "zero_optimization { stage: 3 reduce_bucket_size: 20000 }"}})},
              dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("zerotrain: Llama "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ZeRO stage 3"), std::string::npos) << r.out;
  const std::vector<double> losses = StepLosses(r.out);
  ASSERT_GE(losses.size(), 3u) << r.out;
  EXPECT_LT(losses.back(), losses.front() - 0.5) << r.out;
}

// CIFAR-10 records (a label byte, then 32x32 red, green and blue planes) whose class shows as a
// bright square at a class-dependent place, over noise: learnable in a few steps.
std::string WriteImages(const std::string& path, int images) {
  std::string bytes;
  uint32_t noise = 12345;
  for (int i = 0; i < images; ++i) {
    const int label = i % 10;
    bytes.push_back(static_cast<char>(label));
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x) {
          noise = noise * 1664525u + 1013904223u;
          const bool mark = y / 8 == label / 4 && x / 8 == label % 4;
          bytes.push_back(static_cast<char>(mark ? 230 : (noise >> 24) % 64));
        }
      }
    }
  }
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(MainInputsTest, ResNetLearnsImagesAtStages1And3WithRecomputation) {
  const std::string dir = Dir("resnet");
  const std::string images = WriteImages(dir + "/data_batch_1.bin", 240);
  for (int stage : {1, 3}) {
    SCOPED_TRACE(stage);
    const std::string run_dir = Dir("resnet_stage" + std::to_string(stage));
    const Result r = RunMain(
        {"--config=" +
         WriteConfig(
             run_dir, run_dir + "/out", 12,
             {{"model", "model { name: \"resnet18\" num_classes: 10 checkpoint_every: 1 }"},
              {"data", "data { source: \"images\" path: \"" + dir + "/data_batch_*.bin\" }"},
              {"bf16", "bf16 { enabled: false }"},
              {"zero", "zero_optimization { stage: " + std::to_string(stage) + " }"}})},
        run_dir);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("zerotrain: ResNet-18 11.18M parameters (10 classes), 2 ranks"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("(216 train / 24 eval images)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("sample: none (not a language model)"), std::string::npos) << r.out;
    const std::vector<double> losses = StepLosses(r.out);
    ASSERT_GE(losses.size(), 2u) << r.out;
    EXPECT_LT(losses.back(), losses.front() - 0.5) << r.out;
  }
}

std::string g_spm_train;  // argv[2]

TEST(MainInputsTest, TextThroughASentencePieceModel) {
  const std::string dir = Dir("spm");
  std::ofstream(dir + "/corpus.txt") << Text(40000);
  auto trained = zerotrain::testing::RunProgram(
      {g_spm_train, "--input=" + dir + "/corpus.txt", "--model_prefix=" + dir + "/spm",
       "--vocab_size=300", "--hard_vocab_limit=false", "--byte_fallback=true", "--minloglevel=2"});
  ASSERT_TRUE(trained.ok()) << trained.status();
  const std::string data = "data { source: \"text\" path: \"" + dir +
                           "/corpus.txt\" tokenizer: \"" + dir + "/spm.model\" }";
  const std::string model =
      "model { n_layer: 2 n_head: 2 n_embd: 64 block_size: 32 vocab_size: 300 }";
  const std::string config = WriteConfig(dir, dir + "/out", 20, {{"data", data}, {"model", model}});
  Result r = RunMain({"--config=" + config}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<double> losses = StepLosses(r.out);
  ASSERT_GE(losses.size(), 2u) << r.out;
  EXPECT_LT(losses.back(), losses.front() - 0.5) << r.out;
  // Decoded pieces, not ids or bytes: the corpus's words.
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("sample \\(20 tokens[^\n]*\nThe[a-z .\n]+\nsummary: ")))
      << r.out;

  r = RunMain({"--config=" + config, "--generate", "--prompt=the quick", "--max_new_tokens=5"},
              dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("zerotrain: continuation (5 tokens, greedy): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nthe quick"), std::string::npos) << r.out;

  const std::string small = WriteConfig(
      Dir("spm_small"), dir + "/out_small", 2,
      {{"data", data}, {"model", "model { n_layer: 1 n_head: 2 n_embd: 32 block_size: 16 }"}});
  r = RunMain({"--config=" + small}, dir);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("has 2[5-9][0-9] pieces, more than model.vocab_size 256")))
      << r.err;
}

}  // namespace
}  // namespace zerotrain::trainer::testing

int main(int argc, char** argv) {
  if (!zerotrain::trainer::testing::StartCpuTests(
          &argc, argv, 2, "main_inputs_test <path of //trainer:main> <spm_train>")) {
    return 2;
  }
  zerotrain::trainer::testing::g_spm_train = argv[2];
  return RUN_ALL_TESTS();
}
