// The child-process runner of the trainer's end-to-end tests (main_runner.h).
#include "trainer/main_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"

extern char** environ;

namespace zerotrain::trainer::testing {
namespace {

std::string g_main;

}  // namespace

void SetMainBinary(const std::string& path) { g_main = path; }
const std::string& MainBinary() { return g_main; }

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool StartCpuTests(int* argc, char** argv, int paths, const char* usage) {
  ::testing::InitGoogleTest(argc, argv);
  if (*argc < 1 + paths) {
    std::fprintf(stderr, "usage: %s\n", usage);
    return false;
  }
  SetMainBinary(argv[1]);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // the children inherit it
  return true;
}

std::string Dir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

std::string WriteConfig(const std::string& dir, const std::string& out_dir, int steps,
                        const std::map<std::string, std::string>& replace) {
  std::map<std::string, std::string> entries = {
      {"micro", "train_micro_batch_size_per_gpu: 4"},
      {"print", "steps_per_print: 5"},
      {"zero", "zero_optimization { stage: 2 reduce_bucket_size: 20000 }"},
      {"bf16", "bf16 { enabled: true }"},
      {"optimizer", "optimizer { type: \"AdamW\" params { lr: 3e-3 } }"},
      {"csv", "csv_monitor { enabled: true job_name: \"t\" }"},
      {"tb", "tensorboard { enabled: true job_name: \"t\" }"},
      {"model", "model { name: \"gpt\" n_layer: 2 n_head: 2 n_embd: 64 block_size: 32 }"},
      {"run", "run { steps: " + std::to_string(steps) + " seed: 1 output_dir: \"" + out_dir +
                  "\" eval_interval: 0 eval_iters: 2 sample_tokens: 20 }"},
  };
  for (const auto& [key, text] : replace) entries[key] = text;
  const std::string path = dir + "/run.pbtxt";
  std::ofstream out(path);
  for (const auto& [key, text] : entries) out << text << "\n";
  return path;
}

Result RunMain(const std::vector<std::string>& flags, const std::string& dir,
               const std::function<void(pid_t)>& during, const std::vector<std::string>& env) {
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, (dir + "/stdout").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, (dir + "/stderr").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {g_main};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = env;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  Result r;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  if (posix_spawn(&pid, g_main.c_str(), &files, nullptr, argv.data(), envp.data()) != 0) return r;
  posix_spawn_file_actions_destroy(&files);
  if (during) during(pid);
  int status = 0;
  waitpid(pid, &status, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Read(dir + "/stdout");
  r.err = Read(dir + "/stderr");
  return r;
}

std::vector<double> StepLosses(const std::string& out) {
  std::vector<double> losses;
  const std::regex line(R"(step +\d+/\d+ \| loss ([0-9.]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    losses.push_back(std::stod((*it)[1]));
  }
  return losses;
}

}  // namespace zerotrain::trainer::testing
