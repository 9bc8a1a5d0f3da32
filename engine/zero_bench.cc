// zero_bench: a ~50M-parameter transformer (16 encoder layers, d_model 512) trained by the Engine
// at ZeRO stages 0, 1, 2 and 3 (with and without prefetch) on local ranks in one run; prints
// samples/s, the step-time split and model-state bytes per rank next to the ZeRO formula, as a
// markdown table. samples/s comes from the median step (forward + Backward + Step between
// barriers); the split columns are means.
//   bazel run -c opt //engine:zero_bench [-- --world=2 --steps=5 --micro=4 --backend=gloo|shm
//                                              --allgather_bucket_size=4194304
//                                              --no_overflow_check]
// Started without rank variables it launches the ranks itself (this binary, one process each,
// OMP_NUM_THREADS=1 unless set, as torchrun does).
#include <torch/nn/modules/transformercoder.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/comm.h"
#include "comm/launcher.h"
#include "engine/engine.h"

namespace zerotrain::engine {
namespace {

constexpr int64_t kDim = 512, kLayers = 16, kSeq = 32;
int64_t micro_batch = 4;             // --micro: samples per rank per step
bool shm = false;                    // --backend=shm
bool check_overflow = true;          // --no_overflow_check: EngineOptions::check_grad_overflow
int64_t allgather_bucket = 1 << 22;  // --allgather_bucket_size, elements (the reduce bucket's)

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "zero_bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

torch::nn::TransformerEncoder MakeModel() {
  torch::manual_seed(0);
  auto layer =
      torch::nn::TransformerEncoderLayerOptions(kDim, 8).dim_feedforward(4 * kDim).dropout(0.0);
  return torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(layer, kLayers));
}

struct Stage {
  int stage = 0;
  bool reduce_scatter = true;
  bool prefetch = true;  // stage 3
  torch::nn::TransformerEncoder model{nullptr};
  std::unique_ptr<Engine> engine;
  std::vector<double> seconds;  // wall time of each timed step
  StepTimes sum;
};

std::unique_ptr<Stage> MakeStage(int stage, bool reduce_scatter, bool prefetch,
                                 comm::ProcessGroup* group) {
  auto s = std::make_unique<Stage>();
  s->stage = stage;
  s->reduce_scatter = reduce_scatter;
  s->prefetch = prefetch;
  s->model = MakeModel();
  EngineOptions o;
  o.stage = stage;
  o.train_micro_batch_size_per_gpu = micro_batch;
  o.reduce_bucket_size = 1 << 22;
  o.allgather_bucket_size = allgather_bucket;
  o.reduce_scatter = reduce_scatter;
  o.check_grad_overflow = check_overflow;
  // DeepSpeed's defaults: LayerNorms (1024 elements) stay whole, prefetch 5e7 elements ahead.
  if (!prefetch) o.stage3.prefetch_numel = 0;
  auto engine = Engine::Create(*s->model, o, group);
  Check(engine.status());
  s->engine = std::move(*engine);
  return s;
}

// One optimizer step (micro batch = global step, GAS 1), timed between barriers.
void TimedStep(Stage& s, comm::ProcessGroup* group, bool record) {
  Check(group->Barrier());
  const double start = Now();
  torch::Tensor x = torch::randn({kSeq, micro_batch, kDim});
  torch::Tensor loss;
  {
    auto scope = s.engine->BeginForward();
    loss = s.model->forward(x).pow(2).mean();
  }
  const double forward = Now() - start;
  Check(s.engine->Backward(loss));
  Check(s.engine->Step());
  Check(group->Barrier());
  if (!record) return;
  s.seconds.push_back(Now() - start);
  const StepTimes& t = s.engine->last_step_times();
  // The engine's own forward figure spans the other stages' turns here, so time it directly.
  s.sum.forward += forward;
  s.sum.backward += t.backward;
  s.sum.backward_comm += t.backward_comm;
  s.sum.step += t.step;
  s.sum.allgather += t.allgather;
}

double SamplesPerSecond(const Stage& s, comm::ProcessGroup* group) {
  std::vector<double> sorted = s.seconds;
  std::sort(sorted.begin(), sorted.end());
  return micro_batch * group->world_size() / sorted[sorted.size() / 2];
}

void PrintStage(const Stage& s, comm::ProcessGroup* group, double stage0_samples) {
  const double samples = SamplesPerSecond(s, group);
  const double n = static_cast<double>(s.seconds.size());
  const ModelStateBytes b = s.engine->model_state_bytes();
  const double mib = 1024.0 * 1024.0;
  const char* reduction = s.stage == 0 || !s.reduce_scatter ? "all-reduce" : "reduce-scatter";
  const std::string name =
      s.stage < 3 ? absl::StrCat(s.stage) : absl::StrCat("3, prefetch ", s.prefetch ? "on" : "off");
  std::printf(
      "| %s | %s | %.2f | %.2fx | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f | "
      "%.1f | %.1f | %.1f | %.1f |\n",
      name.c_str(), reduction, samples, samples / stage0_samples, 1e3 * s.sum.forward / n,
      1e3 * s.sum.backward / n, 1e3 * s.sum.backward_comm / n, 1e3 * s.sum.step / n,
      1e3 * s.sum.allgather / n, b.params / mib, b.grads / mib, b.master / mib,
      b.optimizer_states / mib, b.total() / mib, s.engine->formula_bytes() / mib);
}

int RunRank(int steps, bool check_calls) {
  auto info = comm::RendezvousFromEnv();
  Check(info.status());
  comm::GroupOptions go;
  go.check_calls = check_calls;
  if (shm) go.backend = comm::BackendKind::kShm;
  auto group = comm::ProcessGroup::Create(*info, go);
  Check(group.status());
  if ((*group)->rank() == 0) {
    int64_t numel = 0;
    for (const auto& p : MakeModel()->parameters()) numel += p.numel();
    std::printf(
        "zero_bench: %lld parameters, %d ranks, fp32, micro batch %lld x seq %lld, "
        "AdamW, reduce buckets 4M elements, all-gathers of at most %lld elements, "
        "overlap_comm on, %s backend, comm call check %s\n\n",
        static_cast<long long>(numel), (*group)->world_size(), static_cast<long long>(micro_batch),
        static_cast<long long>(kSeq), static_cast<long long>(allgather_bucket),
        shm ? "shm" : "gloo", check_calls ? "on" : "off");
    std::printf(
        "| stage | gradient reduction | samples/s | vs stage 0 | forward ms | "
        "backward ms | bwd comm ms | step ms | all-gather ms | params MiB | grads MiB | "
        "master MiB | optim MiB | total MiB | formula MiB |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  // The stages take turns step by step, so drift on this shared machine hits all of them alike.
  std::vector<std::unique_ptr<Stage>> stages;
  for (auto [stage, rs] :
       {std::pair{0, true}, {1, true}, {2, true}, {1, false}, {2, false}, {3, true}, {3, false}}) {
    stages.push_back(MakeStage(stage, rs, /*prefetch=*/true, group->get()));
  }
  stages.push_back(MakeStage(3, false, /*prefetch=*/false, group->get()));
  for (int i = 0; i < 2 + steps; ++i) {
    for (auto& s : stages) TimedStep(*s, group->get(), /*record=*/i >= 2);
  }
  if ((*group)->rank() == 0) {
    const double stage0 = SamplesPerSecond(*stages[0], group->get());
    for (const auto& s : stages) PrintStage(*s, group->get(), stage0);
    std::printf("\n");
    const double rounds = 2.0 + steps;
    for (const auto& s : stages) {
      if (s->stage != 3) continue;
      const partition::GatherStats g = s->engine->gather_stats();
      std::printf(
          "stage 3 (%s, prefetch %s), rank 0, per step: %.1f segment gathers, %.1f of them "
          "prefetched, %.0f ms waiting for gathers; peak %.1f MiB gathered at once, "
          "%.1f MiB persistent\n",
          s->reduce_scatter ? "reduce-scatter" : "all-reduce", s->prefetch ? "on" : "off",
          g.gathers / rounds, g.prefetches / rounds, 1e3 * g.wait_seconds / rounds,
          g.peak_live_numel * 4.0 / (1024 * 1024), g.persistent_numel * 4.0 / (1024 * 1024));
    }
  }
  return 0;
}

}  // namespace
}  // namespace zerotrain::engine

int main(int argc, char** argv) {
  int world = 2, steps = 5;
  int64_t micro = 4;
  bool check_calls = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool ok = false;
    if (a.rfind("--world=", 0) == 0) ok = absl::SimpleAtoi(a.substr(8), &world) && world > 0;
    if (a.rfind("--steps=", 0) == 0) ok = absl::SimpleAtoi(a.substr(8), &steps) && steps > 0;
    if (a.rfind("--micro=", 0) == 0) ok = absl::SimpleAtoi(a.substr(8), &micro) && micro > 0;
    if (a == "--no_call_check") ok = !(check_calls = false);
    if (a == "--no_overflow_check") ok = !(zerotrain::engine::check_overflow = false);
    if (a.rfind("--allgather_bucket_size=", 0) == 0) {
      ok = absl::SimpleAtoi(a.substr(24), &zerotrain::engine::allgather_bucket) &&
           zerotrain::engine::allgather_bucket > 0;
    }
    if (a == "--backend=gloo" || a == "--backend=shm") {
      ok = true;
      zerotrain::engine::shm = a == "--backend=shm";
    }
    if (!ok) {
      std::fprintf(stderr,
                   "zero_bench: bad flag %s (--world=N --steps=N --micro=N --backend=gloo|shm "
                   "--allgather_bucket_size=N --no_call_check --no_overflow_check)\n",
                   a.c_str());
      return 2;
    }
  }
  zerotrain::engine::micro_batch = micro;
  if (std::getenv("RANK") != nullptr) {
    zerotrain::comm::DieWithLauncher();
    return zerotrain::engine::RunRank(steps, check_calls);
  }
  std::vector<std::string> args = {absl::StrCat("--steps=", steps),
                                   absl::StrCat("--micro=", micro)};
  if (!check_calls) args.push_back("--no_call_check");
  if (!zerotrain::engine::check_overflow) args.push_back("--no_overflow_check");
  if (zerotrain::engine::shm) args.push_back("--backend=shm");
  args.push_back(absl::StrCat("--allgather_bucket_size=", zerotrain::engine::allgather_bucket));
  zerotrain::comm::LaunchOptions launch;
  launch.nproc_per_node = world;
  launch.master_port = 29750;
  launch.args = args;
  absl::Status s = zerotrain::comm::LaunchRanks(launch);
  if (!s.ok()) {
    std::fprintf(stderr, "zero_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
