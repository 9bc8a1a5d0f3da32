// zerotrain's GPT-2 and Llama against Hugging Face transformers itself (make_models.py, run in the
// project venv): tiny random models that transformers built and saved (safetensors, sharded
// safetensors with an index, a torch.save state dict) load through model.init_from's path
// (hf_config.h, hf_weights.h) and give transformers' logits (fp32, tight tolerance) and its
// greedy continuation; checkpoints that do not fit the model are one error naming every tensor.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "hf/hf_config.h"
#include "hf/hf_weights.h"
#include "models/generate.h"
#include "models/model.h"
#include "tests/hf/hf_reference.h"

namespace zerotrain::trainer {
namespace {

std::string ModelsDir() {
  absl::StatusOr<std::string> dir = zerotrain::testing::HfModelsDir();
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "/nonexistent";
}

at::Tensor Expected(const std::string& name) {
  absl::StatusOr<at::Tensor> t = zerotrain::testing::HfExpected(name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : at::Tensor();
}

// The model init_from would build and load for `path`.
std::shared_ptr<models::CausalLm> Load(const std::string& path, models::ModelOptions* options) {
  absl::StatusOr<bool> has_config = hf::ReadHfArchitecture(path, options);
  EXPECT_TRUE(has_config.ok() && *has_config) << has_config.status();
  auto model = models::MakeModel(*options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  auto loaded = hf::LoadHfWeights(path, *options, **model);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return nullptr;
  EXPECT_GT(loaded->tensors, 0);
  (*model)->eval();
  return std::dynamic_pointer_cast<models::CausalLm>(*model);
}

void ExpectSameLogits(models::CausalLm& model, const at::Tensor& tokens, const at::Tensor& want) {
  torch::NoGradGuard no_grad;
  const at::Tensor got = model.forward(tokens);
  ASSERT_EQ(got.sizes(), want.sizes());
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LT(diff, 2e-5) << "largest logit difference from transformers";
  EXPECT_GT(want.abs().max().item<double>(), 0.1) << "the reference logits should not be ~0";
}

void ExpectSameGreedy(models::CausalLm& model, const at::Tensor& tokens, const at::Tensor& want) {
  std::vector<int64_t> prompt(tokens[0].data_ptr<int64_t>(),
                              tokens[0].data_ptr<int64_t>() + tokens.size(1));
  models::GenerateOptions g;
  g.greedy = true;
  g.max_new_tokens = want.size(0) - tokens.size(1);
  auto got = models::ContinueTokens(model, prompt, g);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<int64_t> expected(want.data_ptr<int64_t>(), want.data_ptr<int64_t>() + want.numel());
  EXPECT_EQ(*got, expected);
}

struct Case {
  const char* name;  // the reference's tensors: <name>.logits, <name>.greedy
  const char* path;  // under the test's directory
  models::ModelFamily family;
};

TEST(HfModelsTest, LogitsAndGreedyContinuationMatchTransformers) {
  const at::Tensor tokens = Expected("tokens");
  for (const Case& c :
       {Case{"gpt2", "gpt2", models::ModelFamily::kGpt2},
        Case{"gpt2", "gpt2_bin/pytorch_model.bin", models::ModelFamily::kGpt2},
        Case{"llama", "llama", models::ModelFamily::kLlama},
        Case{"llama_tied", "llama_tied/model.safetensors", models::ModelFamily::kLlama}}) {
    SCOPED_TRACE(c.path);
    models::ModelOptions options;
    std::shared_ptr<models::CausalLm> model = Load(ModelsDir() + "/" + c.path, &options);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(options.family, c.family);
    ExpectSameLogits(*model, tokens, Expected(std::string(c.name) + ".logits"));
    ExpectSameGreedy(*model, tokens, Expected(std::string(c.name) + ".greedy"));
  }
}

TEST(HfModelsTest, ACheckpointThatDoesNotFitNamesEveryTensor) {
  const std::string llama = ModelsDir() + "/llama";
  models::ModelOptions options;
  ASSERT_TRUE(hf::ReadHfArchitecture(llama, &options).ok());
  options.n_layer = 3;    // one layer more than the checkpoint
  options.n_kv_head = 4;  // k/v projections twice as wide
  auto model = models::MakeModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  const at::Tensor before = (*model)->named_parameters()["model.norm.weight"].clone();
  auto loaded = hf::LoadHfWeights(llama, options, **model);
  ASSERT_FALSE(loaded.ok());
  const std::string message(loaded.status().message());
  for (const char* part : {"missing (model.layers.2.", "mis-shaped",
                           "model.layers.0.self_attn.k_proj.weight: [16, 32] where the model has "
                           "[32, 32]"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
  }
  EXPECT_TRUE(torch::equal(before, (*model)->named_parameters()["model.norm.weight"]))
      << "nothing is copied from a checkpoint that does not fit";

  // GPT-2's tensors offered to a Llama: every one unexpected, every Llama tensor missing.
  models::ModelOptions gpt2;
  ASSERT_TRUE(hf::ReadHfArchitecture(ModelsDir() + "/gpt2", &gpt2).ok());
  loaded = hf::LoadHfWeights(ModelsDir() + "/gpt2",
                             gpt2.family == models::ModelFamily::kGpt2 ? options : gpt2, **model);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("unexpected (transformer."), std::string::npos)
      << loaded.status();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Truncated and damaged copies of transformers' files through the whole loader (safetensors,
// pytorch_model.bin, config.json): each is an error naming the file, or (a byte changed inside
// tensor data) loads; none crashes. The safetensors parser's own fuzzing runs under ASan and
// UBSan in CI (hf/safetensors_errors_test).
TEST(HfModelsTest, TruncatedAndDamagedCheckpointsAreErrorsNotCrashes) {
  const std::string src = ModelsDir() + "/gpt2";
  const std::string dir = ModelsDir() + "/damaged";
  std::filesystem::create_directories(dir);
  const std::string config = ReadAll(src + "/config.json");
  models::ModelOptions options;
  ASSERT_TRUE(hf::ParseHfConfig(config, "config.json", &options).ok());
  auto model = models::MakeModel(options);
  ASSERT_TRUE(model.ok());
  std::mt19937 rng(17);
  int errors = 0, loads = 0;
  auto attempt = [&](const std::string& file, const std::string& bytes) {
    std::ofstream(dir + "/" + file, std::ios::binary | std::ios::trunc) << bytes;
    auto loaded = hf::LoadHfWeights(dir + "/" + file, options, **model);
    if (loaded.ok()) {
      ++loads;
    } else {
      ++errors;
      EXPECT_NE(loaded.status().message().find(dir), std::string::npos) << loaded.status();
    }
  };
  for (const char* name : {"model.safetensors"}) {
    const std::string whole = ReadAll(src + "/" + name);
    for (size_t cut = 0; cut < whole.size(); cut += 1 + cut / 8)
      attempt(name, whole.substr(0, cut));
    const size_t header =
        8 + static_cast<unsigned char>(whole[0]) + 256 * static_cast<unsigned char>(whole[1]);
    for (int i = 0; i < 300; ++i) {
      std::string damaged = whole;
      const size_t at = rng() % std::min(damaged.size(), header + 64);
      damaged[at] = static_cast<char>(rng() % 256);
      attempt(name, damaged);
    }
  }
  const std::string bin = ReadAll(ModelsDir() + "/gpt2_bin/pytorch_model.bin");
  for (size_t cut = 0; cut < bin.size(); cut += 1 + bin.size() / 40) {
    attempt("pytorch_model.bin", bin.substr(0, cut));
  }
  EXPECT_GT(errors, 100);
  for (size_t cut = 0; cut < config.size(); cut += 7) {
    models::ModelOptions o;
    absl::Status s = hf::ParseHfConfig(config.substr(0, cut), "config.json", &o);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("config.json"), std::string::npos) << s;
  }
}

TEST(HfConfigTest, UnsupportedConfigsNameTheKey) {
  models::ModelOptions o;
  const std::string llama =
      R"({"model_type": "llama", "vocab_size": 10, "max_position_embeddings": 8,
          "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 16)";
  EXPECT_TRUE(hf::ParseHfConfig(llama + "}", "c.json", &o).ok());
  EXPECT_EQ(o.n_kv_head, 2);
  EXPECT_EQ(o.rms_norm_eps, 1e-6);  // LlamaConfig's default
  for (const auto& [extra, needle] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "rope_scaling": {"rope_type": "llama3"})", "\"rope_scaling\" is"},
           {R"(, "hidden_act": "gelu")", "\"hidden_act\" is \"gelu\""},
           {R"(, "attention_bias": true)", "\"attention_bias\" is true"},
           {R"(, "head_dim": 8)", "\"head_dim\" is 8"}}) {
    absl::Status s = hf::ParseHfConfig(llama + extra + "}", "c.json", &o);
    EXPECT_NE(s.message().find("c.json: " + needle), std::string::npos) << s;
  }
  absl::Status s = hf::ParseHfConfig(R"({"model_type": "bert"})", "c.json", &o);
  EXPECT_NE(s.message().find("\"model_type\" is \"bert\""), std::string::npos) << s;
  s = hf::ParseHfConfig(R"({"model_type": "gpt2", "n_embd": 8})", "c.json", &o);
  EXPECT_NE(s.message().find("c.json"), std::string::npos) << s;
  EXPECT_NE(s.message().find("vocab_size"), std::string::npos) << s;
}

}  // namespace
}  // namespace zerotrain::trainer
