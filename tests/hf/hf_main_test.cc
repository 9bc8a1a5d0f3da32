// //trainer:main with Hugging Face checkpoints, as a user runs it, against transformers itself:
// model.init_from then --export_hf (no training) writes back every tensor bitwise, and
// transformers loads what it wrote unchanged and computes the original logits; --generate's greedy
// continuation is transformers'; and a model fine-tuned from init_from (ZeRO stage 3) exports to
// a checkpoint whose logits in transformers are zerotrain's own.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "hf/hf_config.h"
#include "hf/hf_weights.h"
#include "hf/safetensors.h"
#include "models/causal_lm.h"
#include "tests/hf/hf_reference.h"
#include "trainer/main_runner.h"

namespace zerotrain::trainer::testing {
namespace {

std::string Models() {
  absl::StatusOr<std::string> dir = zerotrain::testing::HfModelsDir();
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "/nonexistent";
}

std::string Config(const std::string& dir, const std::string& model, const std::string& extra) {
  const std::string path = dir + "/run.pbtxt";
  std::ofstream(path) << "train_micro_batch_size_per_gpu: 2\nmodel { " << model << " }\n"
                      << "run { output_dir: \"" << dir << "/out\" " << extra << " }\n";
  return path;
}

// Every tensor of a safetensors checkpoint (one file or shards), by name.
std::map<std::string, at::Tensor> Tensors(const std::string& path) {
  std::map<std::string, at::Tensor> out;
  auto files = hf::FindHfCheckpoint(path);
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return out;
  for (const std::string& file : files->weight_files) {
    auto header = hf::ReadSafetensorsHeader(file);
    EXPECT_TRUE(header.ok()) << header.status();
    for (const auto& t : header->tensors) out[t.name] = *hf::ReadSafetensorsTensor(*header, t.name);
  }
  return out;
}

TEST(HfMainTest, InitFromThenExportIsBitwiseAndTransformersLoadsIt) {
  for (const char* name : {"gpt2", "llama", "llama_tied"}) {
    SCOPED_TRACE(name);
    const std::string dir = Dir(std::string("export_") + name);
    const std::string src = Models() + "/" + name;
    const Result r = RunMain(
        {"--config=" + Config(dir, "init_from: \"" + src + "\"", ""), "--export_hf=" + dir + "/hf"},
        dir);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::map<std::string, at::Tensor> want = Tensors(src), got = Tensors(dir + "/hf");
    ASSERT_FALSE(want.empty());
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [tensor, value] : want) {
      ASSERT_TRUE(got.count(tensor)) << tensor;
      EXPECT_EQ(got.at(tensor).scalar_type(), value.scalar_type()) << tensor;
      EXPECT_TRUE(torch::equal(got.at(tensor), value)) << tensor << " differs";
    }
    auto hf = zerotrain::testing::RunExportedInTransformers(dir + "/hf");
    ASSERT_TRUE(hf.ok()) << hf.status();
    EXPECT_EQ(hf->model_class,
              std::string(name).substr(0, 4) == "gpt2" ? "GPT2LMHeadModel" : "LlamaForCausalLM");
    auto want_logits = zerotrain::testing::HfExpected(std::string(name) + ".logits");
    ASSERT_TRUE(want_logits.ok()) << want_logits.status();
    EXPECT_TRUE(torch::equal(hf->logits, *want_logits)) << "transformers on what we wrote";
  }
}

TEST(HfMainTest, GreedyGenerationIsTransformers) {
  auto tokens = zerotrain::testing::HfExpected("tokens");
  auto greedy = zerotrain::testing::HfExpected("llama.greedy");
  ASSERT_TRUE(tokens.ok() && greedy.ok());
  const at::Tensor prompt = (*tokens)[0].contiguous();
  const std::vector<int64_t> ids(prompt.data_ptr<int64_t>(),
                                 prompt.data_ptr<int64_t>() + prompt.numel());
  const std::vector<int64_t> all(greedy->data_ptr<int64_t>(),
                                 greedy->data_ptr<int64_t>() + greedy->numel());
  const std::vector<int64_t> want(all.begin() + ids.size(), all.end());
  const std::string dir = Dir("generate");
  const Result r = RunMain({"--config=" + Config(dir, "init_from: \"" + Models() + "/llama\"", ""),
                            "--generate", "--prompt_tokens=" + absl::StrJoin(ids, ","),
                            "--max_new_tokens=" + std::to_string(want.size())},
                           dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string line = absl::StrCat("zerotrain: continuation (", want.size(),
                                        " tokens, greedy): ", absl::StrJoin(want, " "), "\n");
  EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

// A nanoGPT token file of ids below the tiny models' vocabulary (96).
std::string TokenFile(const std::string& dir) {
  std::string bytes;
  for (int i = 0; i < 6000; ++i) {
    const int id = (i * 7 + i / 13) % 96;
    bytes.push_back(static_cast<char>(id));
    bytes.push_back(0);
  }
  std::ofstream(dir + "/train.bin", std::ios::binary) << bytes;
  return dir + "/train.bin";
}

TEST(HfMainTest, AFineTunedModelExportsToWhatTransformersComputesAsWeDo) {
  const std::string dir = Dir("fine_tune");
  const std::string src = Models() + "/llama";
  const std::string model = "init_from: \"" + src + "\"";
  const std::string data = "data { source: \"tokens\" path: \"" + TokenFile(dir) + "\" }\n";
  std::string config =
      Config(dir, model, "steps: 4 save_interval: 4 eval_interval: 0 sample_tokens: 0");
  std::ofstream(config, std::ios::app) << data << "zero_optimization { stage: 3 }\n"
                                       << "optimizer { type: \"AdamW\" params { lr: 1e-2 } }\n";
  Result r = RunMain({"--config=" + config}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("zerotrain: loaded "), std::string::npos) << r.out;

  const std::string export_dir = Dir("fine_tune_export");
  const std::string resumed =
      Config(export_dir, model, "resume_from: \"" + dir + "/out/checkpoints\"");
  r = RunMain({"--config=" + resumed, "--export_hf=" + export_dir + "/hf"}, export_dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto before = Tensors(src), after = Tensors(export_dir + "/hf");
  ASSERT_EQ(after.size(), before.size());
  EXPECT_FALSE(torch::equal(after.at("model.norm.weight"), before.at("model.norm.weight")))
      << "four AdamW steps should have moved the weights";

  // Ours: the same files through init_from's loader; theirs: transformers on them.
  models::ModelOptions options;
  ASSERT_TRUE(hf::ReadHfArchitecture(export_dir + "/hf", &options).ok());
  auto ours = models::MakeModel(options);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(hf::LoadHfWeights(export_dir + "/hf", options, **ours).ok());
  (*ours)->eval();
  auto hf = zerotrain::testing::RunExportedInTransformers(export_dir + "/hf");
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto tokens = zerotrain::testing::HfExpected("tokens");
  ASSERT_TRUE(tokens.ok());
  torch::NoGradGuard no_grad;
  const double diff = ((*ours)->forward(*tokens) - hf->logits).abs().max().item<double>();
  EXPECT_LT(diff, 2e-5);
}

// At stage 3 the checkpoint fills each block as it is built and ShardedInit partitions it at
// once; the model must be the one stage 0 loads whole: the same loss before any step.
TEST(HfMainTest, Stage3LoadsBlockByBlockTheModelStage0LoadsWhole) {
  std::map<int, std::string> eval_line;
  for (int stage : {0, 3}) {
    const std::string dir = Dir("stage" + std::to_string(stage));
    std::string config = Config(dir, "init_from: \"" + Models() + "/llama\"",
                                "steps: 1 eval_interval: 0 eval_iters: 4 sample_tokens: 0");
    std::ofstream(config, std::ios::app)
        << "data { source: \"tokens\" path: \"" << TokenFile(dir) << "\" }\n"
        << "zero_optimization { stage: " << stage << " }\n";
    const Result r = RunMain({"--config=" + config}, dir);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("zerotrain: loaded 21 tensors"), std::string::npos) << r.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("eval at step 0: loss [0-9.]+"))) << r.out;
    eval_line[stage] = m.str();
  }
  EXPECT_EQ(eval_line[3], eval_line[0]);
}

}  // namespace
}  // namespace zerotrain::trainer::testing

int main(int argc, char** argv) {
  if (!zerotrain::trainer::testing::StartCpuTests(&argc, argv, 1,
                                                  "hf_main_test <path of //trainer:main>"))
    return 2;
  return RUN_ALL_TESTS();
}
