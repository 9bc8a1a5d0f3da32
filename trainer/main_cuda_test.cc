// //trainer:main on CUDA, as a user runs it on a GPU machine (tools/gpu_check.sh passes the staged
// binary): a short 2-rank stage 2 bf16 run with run.device "cuda" learns (the summary's final
// train loss is well below the first), says it runs on CUDA and reports the caching allocator's
// peaks. On one GPU the two ranks share it over Gloo (dist_backend auto), on two or more they
// use NCCL. Skips, saying why, where no CUDA device is visible.
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace {

std::string g_main;  // argv[1]: the trainer binary

// Runs `command` through the shell; its stdout and stderr together, and the exit status.
std::string RunShell(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

TEST(MainCudaTest, TheDefaultGptLearnsOnCuda) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device visible (a CPU machine, or a binary built without "
                    "--config=cuda); tools/gpu_check.sh runs it on a GPU machine";
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string config = dir + "/cuda_run.pbtxt";
  std::ofstream(config)
      << "train_micro_batch_size_per_gpu: 8\n"
         "steps_per_print: 10\n"
         "zero_optimization { stage: 2 }\n"
         "bf16 { enabled: true }\n"
         "optimizer { type: \"AdamW\" params { lr: 3e-3 } }\n"
         "model { name: \"gpt\" n_layer: 2 n_head: 2 n_embd: 64 block_size: 64 }\n"
         "run { steps: 60 seed: 1 device: \"cuda\" output_dir: \""
      << dir << "/cuda_run\" eval_interval: 0 eval_iters: 2 sample_tokens: 20 }\n";
  int status = -1;
  const std::string out =
      RunShell("timeout 120 " + g_main + " --config=" + config + " --nproc_per_node=2", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("zerotrain: device cuda"), std::string::npos) << out;
  EXPECT_NE(out.find("cuda peak"), std::string::npos) << out;
  EXPECT_NE(out.find("device<->host traffic, rank 0: to host"), std::string::npos) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(train loss ([0-9.]+) -> ([0-9.]+))"))) << out;
  const double first = std::stod(m[1]), last = std::stod(m[2]);
  EXPECT_LT(last, 0.8 * first) << out;
  std::printf("trainer on CUDA: train loss %.4f -> %.4f\n", first, last);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: main_cuda_test <path of //trainer:main>\n");
    return 2;
  }
  g_main = argv[1];
  return RUN_ALL_TESTS();
}
