// Bring your own model: a repository that is not zerotrain defines its own small module, trains it
// through @zerotrain//engine alone at ZeRO stages 1 and 3 on the ranks the environment names
// (torchrun-style variables), saves a checkpoint, loads it into a fresh engine, and checks that
// the loss fell and that the loaded parameters are the saved ones. docs/ENGINE.md opens with it.
//   RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 own_model <checkpoint dir>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"

namespace {

namespace comm = zerotrain::comm;
namespace engine = zerotrain::engine;

// The user's model: a two-layer regressor, nothing of zerotrain's in it.
struct Regressor : torch::nn::Module {
  Regressor() {
    torch::manual_seed(7);
    hidden = register_module("hidden", torch::nn::Linear(16, 64));
    out = register_module("out", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return out(torch::relu(hidden(x))); }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};

constexpr int64_t kGlobalBatch = 32;

// This rank's rows of step `step`'s global batch of y = x . w + 0.5 (the same on every rank).
std::pair<torch::Tensor, torch::Tensor> Batch(int step, int rank, int world) {
  torch::manual_seed(1000 + step);
  torch::Tensor x = torch::randn({kGlobalBatch, 16});
  torch::Tensor y = x.matmul(torch::linspace(-1, 1, 16)).unsqueeze(1) + 0.5;
  const int64_t rows = kGlobalBatch / world;
  return {x.narrow(0, rank * rows, rows), y.narrow(0, rank * rows, rows)};
}

engine::EngineOptions Options(int stage, int world) {
  engine::EngineOptions o;
  o.stage = stage;
  o.train_micro_batch_size_per_gpu = kGlobalBatch / world;
  o.adam.lr = 1e-2;
  return o;
}

// One optimizer step; returns the loss averaged over the ranks.
absl::StatusOr<double> TrainStep(engine::Engine& e, Regressor& model, comm::ProcessGroup& group,
                                 int step) {
  auto [x, y] = Batch(step, group.rank(), group.world_size());
  torch::Tensor loss;
  {
    auto forward = e.BeginForward();  // stage 3 gathers parameters on use inside it
    loss = torch::mse_loss(model.forward(x), y);
  }
  if (absl::Status s = e.Backward(loss); !s.ok()) return s;
  if (absl::Status s = e.Step(); !s.ok()) return s;
  torch::Tensor mean = loss.detach().reshape({1}).clone();
  if (absl::Status s = group.AllReduce(mean, comm::ReduceOp::kAvg); !s.ok()) return s;
  return mean.item<double>();
}

// Every parameter's full values, concatenated (GatheredParameters gathers them at stage 3).
absl::StatusOr<torch::Tensor> AllValues(engine::Engine& e, Regressor& model) {
  std::vector<torch::Tensor> params = model.parameters();
  auto gathered = e.GatherParameters(params);
  if (!gathered.ok()) return gathered.status();
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : params) flat.push_back(p.detach().flatten().clone());
  if (absl::Status s = (*gathered)->Close(); !s.ok()) return s;
  return torch::cat(flat);
}

absl::Status TrainSaveLoad(int stage, comm::ProcessGroup& group, const std::string& dir) {
  Regressor model;
  auto e = engine::Engine::Create(model, Options(stage, group.world_size()), &group);
  if (!e.ok()) return e.status();
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    auto loss = TrainStep(**e, model, group, step);
    if (!loss.ok()) return loss.status();
    (step == 0 ? first : last) = *loss;
  }
  if (!(last < 0.5 * first)) {
    return absl::InternalError(absl::StrCat("stage ", stage, ": loss went from ", first, " to ",
                                            last, "; it should at least halve"));
  }
  const std::string tag = absl::StrCat("stage", stage);
  if (absl::Status s = (*e)->SaveCheckpoint(dir, tag); !s.ok()) return s;
  auto saved = AllValues(**e, model);
  if (!saved.ok()) return saved.status();

  Regressor fresh;  // the same seed: loading must change it
  auto reloaded = engine::Engine::Create(fresh, Options(stage, group.world_size()), &group);
  if (!reloaded.ok()) return reloaded.status();
  if (auto s = (*reloaded)->LoadCheckpoint(dir, tag); !s.ok()) return s.status();
  auto loaded = AllValues(**reloaded, fresh);
  if (!loaded.ok()) return loaded.status();
  if (!torch::equal(*saved, *loaded)) {
    return absl::InternalError(absl::StrCat("stage ", stage,
                                            ": the loaded parameters differ "
                                            "from the saved ones"));
  }
  auto next = TrainStep(**reloaded, fresh, group, 40);
  if (!next.ok()) return next.status();
  if (group.rank() == 0) {
    std::printf(
        "own_model: stage %d on %d ranks: loss %.4f -> %.4f, checkpoint %s/%s reloaded "
        "bitwise, next step loss %.4f\n",
        stage, group.world_size(), first, last, dir.c_str(), tag.c_str(), *next);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: own_model <checkpoint dir> (with RANK, WORLD_SIZE, MASTER_ADDR, "
                 "MASTER_PORT set)\n");
    return 2;
  }
  auto info = comm::RendezvousFromEnv();
  if (!info.ok()) {
    std::fprintf(stderr, "own_model: %s\n", std::string(info.status().message()).c_str());
    return 2;
  }
  auto group = comm::ProcessGroup::Create(*info, comm::GroupOptions{});
  if (!group.ok()) {
    std::fprintf(stderr, "own_model: %s\n", std::string(group.status().message()).c_str());
    return 1;
  }
  for (int stage : {1, 3}) {
    absl::Status s = TrainSaveLoad(stage, **group, argv[1]);
    if (!s.ok()) {
      std::fprintf(stderr, "own_model: rank %d: %s\n", info->rank,
                   std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}
