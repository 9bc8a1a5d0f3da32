// activation_checkpoint_bench: the cost and saving of activation recomputation on a stack of
// transformer encoder layers (zero_bench's kind of model, smaller so both variants run in well
// under a minute on one thread). Per variant: median forward+backward step time, the CPU bytes
// alive after forward (what the graph keeps for backward), the peak during the step and the
// recomputation time; as a markdown table. Steps of the two variants alternate, so a machine
// busy with other work slows both alike.
//   bazel run -c opt //recompute:activation_checkpoint_bench [-- --steps=7 --threads=1 --dim=256
//       --heads=8 --layers=12 --seq=128 --batch=8]
#include <torch/nn/modules/transformerlayer.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "recompute/activation_checkpoint.h"
#include "recompute/allocation_counter.h"

namespace zerotrain::recompute {
namespace {

// Defaults; each is also a flag (--dim=512 ...).
struct Sizes {
  int64_t dim = 256, heads = 8, layers = 12, seq = 128, batch = 8;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Variant {
  Variant(const char* name, bool checkpointed) : name(name), checkpointed(checkpointed) {}
  const char* name;
  bool checkpointed;
  std::vector<double> seconds;
  std::vector<double> live_after_forward, peak;  // bytes
  double recompute_seconds = 0;
};

struct Model {
  torch::nn::Module root;
  std::vector<torch::nn::TransformerEncoderLayer> layers;
  explicit Model(const Sizes& z) {
    torch::manual_seed(0);
    auto options = torch::nn::TransformerEncoderLayerOptions(z.dim, z.heads)
                       .dim_feedforward(4 * z.dim)
                       .dropout(0.1);
    for (int i = 0; i < z.layers; ++i) {
      layers.push_back(root.register_module("layer" + std::to_string(i),
                                            torch::nn::TransformerEncoderLayer(options)));
    }
  }
};

void Step(Model& model, Variant& v, const torch::Tensor& x) {
  for (auto p : model.root.parameters()) p.mutable_grad() = torch::Tensor();
  ActivationCheckpointOptions opts;
  opts.profile = true;
  ResetRecomputeStats();
  double start = Now();
  double live;
  {
    AllocationCounter counter;
    torch::Tensor h = x;
    for (auto& layer : model.layers) {
      auto fn = [&layer](const torch::Tensor& t) { return layer->forward(t); };
      h = v.checkpointed ? CheckpointBlock(fn, h, opts) : fn(h);
    }
    torch::Tensor loss = h.pow(2).mean();
    live = static_cast<double>(counter.live_bytes());
    loss.backward();
    v.peak.push_back(static_cast<double>(counter.peak_bytes()));
  }
  v.seconds.push_back(Now() - start);
  v.live_after_forward.push_back(live);
  v.recompute_seconds += GetRecomputeStats().seconds;
}

double Median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

int64_t Flag(int argc, char** argv, const char* name, int64_t fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      char* end = nullptr;
      long long v = std::strtoll(argv[i] + prefix.size(), &end, 10);
      if (*end != '\0' || v < 1) {
        std::fprintf(stderr, "activation_checkpoint_bench: %s needs a positive integer, got '%s'\n",
                     prefix.c_str(), argv[i] + prefix.size());
        std::exit(2);
      }
      return v;
    }
  }
  return fallback;
}

int Run(int argc, char** argv) {
  const int64_t steps = Flag(argc, argv, "steps", 7);
  const int64_t threads = Flag(argc, argv, "threads", 1);
  Sizes z;
  z.dim = Flag(argc, argv, "dim", z.dim);
  z.heads = Flag(argc, argv, "heads", z.heads);
  z.layers = Flag(argc, argv, "layers", z.layers);
  z.seq = Flag(argc, argv, "seq", z.seq);
  z.batch = Flag(argc, argv, "batch", z.batch);
  torch::set_num_threads(static_cast<int>(threads));
  Model model(z);
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({z.seq, z.batch, z.dim});
  Variant warm_plain("plain", false), warm_checkpointed("checkpoint every layer", true);
  Step(model, warm_plain, x);  // first-touch allocations, oneDNN primitive caches
  Step(model, warm_checkpointed, x);
  Variant plain("plain", false), checkpointed("checkpoint every layer", true);
  for (int64_t s = 0; s < steps; ++s) {
    Step(model, plain, x);
    Step(model, checkpointed, x);
  }
  int64_t params = 0;
  for (const auto& p : model.root.parameters()) params += p.numel();
  std::printf(
      "model: %lld encoder layers, d_model %lld, %lld heads, ffn %lld, seq %lld, "
      "batch %lld, dropout 0.1, fp32, %.1fM parameters; %lld threads; median of %lld steps\n\n",
      (long long)z.layers, (long long)z.dim, (long long)z.heads, (long long)(4 * z.dim),
      (long long)z.seq, (long long)z.batch, params / 1e6, (long long)threads, (long long)steps);
  std::printf(
      "| variant | step s (fwd+bwd) | vs plain | live after forward MiB | vs plain | peak "
      "MiB | recompute s/step |\n|---|---|---|---|---|---|---|\n");
  const double base_t = Median(plain.seconds), base_live = Median(plain.live_after_forward);
  for (Variant* v : {&plain, &checkpointed}) {
    const double t = Median(v->seconds), live = Median(v->live_after_forward);
    std::printf("| %s | %.3f | %+.1f%% | %.1f | %.1f%% | %.1f | %.3f |\n", v->name, t,
                100.0 * (t / base_t - 1), live / (1 << 20), 100.0 * live / base_live,
                Median(v->peak) / (1 << 20), v->recompute_seconds / steps);
  }
  return 0;
}

}  // namespace
}  // namespace zerotrain::recompute

int main(int argc, char** argv) { return zerotrain::recompute::Run(argc, argv); }
