// The GPT learns: a few AdamW steps on the embedded corpus lower the loss on held-out text; and
// the sampler continues a prompt deterministically with printable text.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include "models/generate.h"
#include "models/gpt.h"
#include "trainer/data/sampler.h"
#include "trainer/data/token_dataset.h"

namespace zerotrain::trainer {
namespace {

// One thread: OpenMP workers spinning against other processes on a 2-core machine cost more than
// they gain at this size.
class OneThread : public ::testing::Environment {
 public:
  void SetUp() override { torch::set_num_threads(1); }
};
const auto* const kOneThread = ::testing::AddGlobalTestEnvironment(new OneThread);

models::GptOptions Small() {
  models::GptOptions o;
  o.block_size = 32;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_embd = 64;
  return o;
}

double EvalLoss(models::Gpt& m, const TokenDataset& data) {
  torch::NoGradGuard g;
  EvalBatches eval(data, 1, 0, 32, 4);
  Batch b;
  double sum = 0;
  int n = 0;
  while (eval.Next(&b)) {
    sum += models::GptLoss(m.forward(b.x), b.y).item<double>();
    ++n;
  }
  return sum / n;
}

TEST(GptTrainTest, AdamWStepsLowerHeldOutLoss) {
  torch::manual_seed(0);
  const models::GptOptions o = Small();
  models::Gpt m(o);
  auto data = LoadTokens(DataOptions{}, o.vocab_size, o.block_size);
  ASSERT_TRUE(data.ok()) << data.status();
  auto sampler = DistributedSampler::Create(data->NumTrainWindows(), 1, 0, 16, 7);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const double before = EvalLoss(m, *data);
  EXPECT_NEAR(before, std::log(256.0), 0.3);  // small initial weights: nearly uniform
  torch::optim::AdamW opt(m.parameters(), torch::optim::AdamWOptions(3e-3));
  for (int step = 0; step < 60; ++step) {
    Batch b = sampler->NextBatch(*data);
    opt.zero_grad();
    models::GptLoss(m.forward(b.x), b.y).backward();
    opt.step();
  }
  const double after = EvalLoss(m, *data);
  EXPECT_LT(after, before - 2.0) << "before " << before << " after " << after;
}

TEST(GptTrainTest, GenerateIsDeterministicPrintableAndCropsContext) {
  torch::manual_seed(1);
  models::Gpt m(Small());
  m.train();
  models::GenerateOptions g;
  g.max_new_tokens = 40;
  g.seed = 5;
  const std::string prompt(50, 'a');  // longer than block_size
  auto a = models::Generate(m, prompt, g);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(m.is_training());
  EXPECT_EQ(a->size(), prompt.size() + 40);
  EXPECT_EQ(a->substr(0, prompt.size()), prompt);
  for (char ch : *a) EXPECT_TRUE((ch >= 0x20 && ch < 0x7f) || ch == '\n' || ch == '\t');
  EXPECT_EQ(*a, *models::Generate(m, prompt, g));
  g.seed = 6;
  EXPECT_NE(*a, *models::Generate(m, prompt, g));
  g.top_k = 1;  // greedy: the seed no longer matters
  const std::string greedy = *models::Generate(m, "", g);
  g.seed = 7;
  EXPECT_EQ(greedy, *models::Generate(m, "", g));
  g.temperature = 0;
  EXPECT_FALSE(models::Generate(m, "x", g).ok());
}

}  // namespace
}  // namespace zerotrain::trainer
