// Times forward+backward of one micro-batch for candidate GPT sizes in fp32 and bf16 on the
// current thread count; used to choose GptOptions' defaults for the ~1 minute default run.
// Usage: gpt_bench [n_layer n_embd n_head batch block]...  (no arguments: a built-in list)
//        gpt_bench train STEPS BATCH LR   (the default model on the embedded corpus with AdamW,
//                                          printing the loss: how many steps the run needs)
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "models/generate.h"
#include "models/gpt.h"
#include "trainer/data/sampler.h"
#include "trainer/data/token_dataset.h"

namespace {

struct Candidate {
  int64_t n_layer, n_embd, n_head, batch, block;
};

double SecondsPerMicroBatch(const Candidate& c, torch::Dtype dtype) {
  zerotrain::models::GptOptions o;
  o.n_layer = c.n_layer;
  o.n_embd = c.n_embd;
  o.n_head = c.n_head;
  o.block_size = c.block;
  zerotrain::models::Gpt model(o);
  model.to(dtype);
  at::Tensor x = torch::randint(0, o.vocab_size, {c.batch, c.block}, torch::kLong);
  at::Tensor y = torch::randint(0, o.vocab_size, {c.batch, c.block}, torch::kLong);
  auto step = [&] {
    at::Tensor loss = zerotrain::models::GptLoss(model.forward(x), y);
    loss.backward();
    model.zero_grad();
  };
  step();  // warm-up: allocator and kernel selection
  const int reps = 3;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

int Train(int steps, int64_t batch, double lr) {
  using namespace zerotrain::models;
  using namespace zerotrain::trainer;
  GptOptions o;
  torch::manual_seed(0);
  Gpt model(o);
  auto data = LoadTokens(DataOptions{}, o.vocab_size, o.block_size);
  auto sampler = DistributedSampler::Create(data->NumTrainWindows(), 1, 0, batch, 1);
  if (!data.ok() || !sampler.ok()) return 1;
  torch::optim::AdamW opt(model.parameters(),
                          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(0.01));
  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    Batch b = sampler->NextBatch(*data);
    at::Tensor loss = GptLoss(model.forward(b.x), b.y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (s % 10 == 0 || s == steps - 1) {
      std::printf("step %d loss %.3f  %.1fs\n", s, loss.item<double>(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      std::fflush(stdout);
    }
  }
  GenerateOptions g;
  g.max_new_tokens = 200;
  std::printf("%s\n", Generate(model, "The ", g).value_or("(failed)").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "train") == 0) {
    return Train(std::atoi(argv[2]), std::atoll(argv[3]), std::atof(argv[4]));
  }
  std::vector<Candidate> candidates;
  for (int i = 1; i + 4 < argc; i += 5) {
    candidates.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1]), std::atoll(argv[i + 2]),
                          std::atoll(argv[i + 3]), std::atoll(argv[i + 4])});
  }
  if (candidates.empty()) {
    candidates = {{5, 320, 5, 8, 128},
                  {5, 320, 5, 16, 64},
                  {4, 384, 6, 8, 128},
                  {6, 256, 4, 8, 128},
                  {4, 384, 6, 16, 64}};
  }
  std::printf("threads=%d\n", torch::get_num_threads());
  std::printf("layer embd head batch block   params   fp32_s  bf16_s\n");
  for (const Candidate& c : candidates) {
    zerotrain::models::GptOptions o;
    o.n_layer = c.n_layer;
    o.n_embd = c.n_embd;
    o.n_head = c.n_head;
    o.block_size = c.block;
    const double fp32 = SecondsPerMicroBatch(c, torch::kFloat);
    const double bf16 = SecondsPerMicroBatch(c, torch::kBFloat16);
    std::printf("%5lld %4lld %4lld %5lld %5lld %8lld  %6.3f  %6.3f\n",
                static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
                static_cast<long long>(c.n_head), static_cast<long long>(c.batch),
                static_cast<long long>(c.block),
                static_cast<long long>(zerotrain::models::GptParameterCount(o)), fp32, bf16);
    std::fflush(stdout);
  }
  return 0;
}
