// //checkpoint:consolidate end to end, under the Engine: 2 ranks train an MLP at ZeRO stage 2 and
// save a sharded checkpoint; the tool, run as a user runs it, turns it into one state dict whose
// tensors LibTorch's torch.save reader loads with the module's names and shapes, equal to the
// trained parameters.
#include <spawn.h>
#include <sys/wait.h>
#include <torch/nn/modules/linear.h>
#include <torch/serialize.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

std::string g_tool;  // argv[1]

int RunTool(const std::vector<std::string>& args) {
  std::vector<std::string> all = {g_tool};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, g_tool.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(13, 37));
    fc2 = register_module("fc2", torch::nn::Linear(37, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

absl::StatusOr<std::string> TrainSaveConsolidate(int rank) {
  auto info = comm::RendezvousFromEnv();
  if (!info.ok()) return info.status();
  ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(*info, {}));
  torch::manual_seed(0);
  Mlp net;
  engine::EngineOptions o;
  o.stage = 2;
  o.train_micro_batch_size_per_gpu = 4;
  o.reduce_bucket_size = 100;  // several buckets, parameters split across ranks
  ZT_ASSIGN_OR_RETURN(auto engine, engine::Engine::Create(net, o, group.get()));
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(100 * step + rank);
    ZT_RETURN_IF_ERROR(engine->Backward(net.forward(torch::randn({4, 13})).pow(2).mean()));
    ZT_RETURN_IF_ERROR(engine->Step());
  }
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ckpt";
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(dir));
  if (rank != 0) return std::string("ok");

  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/model.pt";
  if (int rc = RunTool({"--checkpoint_dir=" + dir, "--output=" + out}); rc != 0) {
    return absl::InternalError(absl::StrCat("consolidate exited with ", rc));
  }
  std::ifstream in(out, std::ios::binary);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  const c10::impl::GenericDict dict = torch::pickle_load(bytes).toGenericDict();
  const auto params = net.named_parameters();
  if (dict.size() != params.size()) {
    return absl::InternalError(absl::StrCat(dict.size(), " tensors, want ", params.size()));
  }
  size_t i = 0;
  for (const auto& item : dict) {  // the module's own order
    const std::string& name = item.key().toStringRef();
    if (name != params[i].key()) {
      return absl::InternalError(
          absl::StrCat("entry ", i, " is ", name, ", want ", params[i].key()));
    }
    if (!torch::equal(item.value().toTensor(), params[i].value())) {
      return absl::InternalError(absl::StrCat(name, " differs from the trained parameter"));
    }
    ++i;
  }
  // A checkpoint that is not there is bad input, as a bad flag is: exit 2.
  if (RunTool({"--checkpoint_dir=" + dir + "/missing", "--output=" + out + ".2"}) != 2) {
    return absl::InternalError("a missing checkpoint did not exit 2");
  }
  return std::string("ok");
}

TEST(ConsolidateTest, ShardedStage2CheckpointBecomesOneStateDict) {
  auto outcomes = testing::SpawnRanks(2, TrainSaveConsolidate);
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << testing::FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::engine

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The ranks SpawnRanks starts get only a test filter, so the tool's path reaches them through
  // the environment they inherit.
  if (argc >= 2) setenv("ZT_CONSOLIDATE_TOOL", argv[1], 1);
  const char* tool = std::getenv("ZT_CONSOLIDATE_TOOL");
  if (tool == nullptr) return 2;
  zerotrain::engine::g_tool = tool;
  return RUN_ALL_TESTS();
}
