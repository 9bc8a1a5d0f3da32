// Tiny networks, data, a training loop and the torch::optim::AdamW reference for the engine
// tests.
#include "engine/test_models.h"

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "tools/status_macros.h"

namespace zerotrain::engine::testing {

WideMlp::WideMlp() {
  torch::manual_seed(7);
  for (int i = 0; i < 6; ++i) {
    layers.push_back(register_module(absl::StrCat("fc", i), torch::nn::Linear(1024, 1024)));
  }
}

torch::Tensor WideMlp::forward(const torch::Tensor& x) {
  torch::Tensor h = x;
  for (auto& l : layers) h = torch::relu(l->forward(h));
  return h;
}
namespace {

// 10 -> 17 -> 5: 277 parameters, odd, so no world size above 1 divides them.
struct Mlp : TestNet {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(10, 17));
    fc2 = register_module("fc2", torch::nn::Linear(17, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// The Mlp (same initial values) with its second layer cast to bf16 by hand: a module with two
// dtype groups, run in an fp32 engine.
struct MixedMlp : Mlp {
  MixedMlp() { fc2->to(torch::kBFloat16); }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor h = torch::tanh(fc1(x));
    return fc2(h.to(torch::kBFloat16)).to(torch::kFloat);
  }
};

// Pre-norm single-head attention and MLP with residuals, then a head: 875 parameters.
struct Block : TestNet {
  static constexpr int64_t kDim = 8;
  Block() {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    // No qkv bias: the key bias gets a gradient that is exactly zero in real arithmetic, i.e.
    // pure rounding noise that Adam would amplify to full-size updates.
    qkv = register_module("qkv",
                          torch::nn::Linear(torch::nn::LinearOptions(kDim, 3 * kDim).bias(false)));
    proj = register_module("proj", torch::nn::Linear(kDim, kDim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    fc1 = register_module("fc1", torch::nn::Linear(kDim, 4 * kDim));
    fc2 = register_module("fc2", torch::nn::Linear(4 * kDim, kDim));
    head = register_module("head", torch::nn::Linear(kDim, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto parts = qkv(ln1(x)).chunk(3, -1);
    auto scores = torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(double(kDim));
    auto h = x + proj(torch::matmul(torch::softmax(scores, -1), parts[2]));
    h = h + fc2(torch::gelu(fc1(ln2(h))));
    return head(h);
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr}, head{nullptr};
};

struct Projection : torch::nn::Module {
  explicit Projection(torch::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  torch::Tensor weight;
};

// A matrix two submodules share (input and output projections tied, as embeddings often are)
// and a submodule called twice in one forward: 8 -> 12 -> mid -> mid -> 8, 261 parameters.
struct Tied : TestNet {
  Tied() {
    in = register_module("in", std::make_shared<Projection>(torch::randn({12, 8}) * 0.3));
    mid = register_module("mid", torch::nn::Linear(12, 12));
    out = register_module("out", std::make_shared<Projection>(in->weight));
    bias = register_parameter("bias", torch::zeros({8}));
    scale = register_parameter("scale", torch::ones({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor h = torch::tanh(torch::linear(x, in->weight));
    h = torch::tanh(mid(h));
    h = torch::tanh(mid(h));
    return torch::matmul(h, out->weight) * scale + bias;
  }
  std::shared_ptr<Projection> in, out;
  torch::nn::Linear mid{nullptr};
  torch::Tensor bias, scale;
};

// Eight residual 10 -> 10 layers (110 parameters each): h + tanh(layer(h)). The residual keeps
// every gradient well away from zero, where Adam would turn rounding noise into full steps.
struct Stack : TestNet {
  explicit Stack(const std::function<void(torch::nn::Module&)>& after_layer) {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int i = 0; i < 8; ++i) {
      torch::nn::Linear layer(10, 10);
      layers->push_back(layer);
      if (after_layer) after_layer(*layer);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor h = x;
    for (const auto& layer : *layers)
      h = h + torch::tanh(layer->as<torch::nn::Linear>()->forward(h));
    return h;
  }
  torch::nn::ModuleList layers{nullptr};
};

}  // namespace

const char* ModelName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp:
      return "mlp";
    case ModelKind::kTransformer:
      return "transformer";
    case ModelKind::kStack:
      return "stack";
    case ModelKind::kMixedMlp:
      return "mixed_mlp";
    default:
      return "tied";
  }
}

std::shared_ptr<TestNet> MakeStack(uint64_t seed,
                                   const std::function<void(torch::nn::Module&)>& after_layer) {
  torch::manual_seed(seed);
  return std::make_shared<Stack>(after_layer);
}

std::shared_ptr<TestNet> MakeNet(ModelKind kind) {
  torch::manual_seed(0);
  if (kind == ModelKind::kMlp) return std::make_shared<Mlp>();
  if (kind == ModelKind::kMixedMlp) return std::make_shared<MixedMlp>();
  if (kind == ModelKind::kTied) return std::make_shared<Tied>();
  if (kind == ModelKind::kStack) return MakeStack(100, nullptr);
  return std::make_shared<Block>();
}

Batch GlobalBatch(ModelKind kind, int step, int64_t size) {
  torch::manual_seed(1000 + step);
  if (kind == ModelKind::kMlp || kind == ModelKind::kMixedMlp) {
    return {torch::randn({size, 10}), torch::randn({size, 5})};
  }
  if (kind == ModelKind::kTied) return {torch::randn({size, 8}), torch::randn({size, 8})};
  if (kind == ModelKind::kStack) return {torch::randn({size, 10}), torch::randn({size, 10})};
  return {torch::randn({size, 5, Block::kDim}), torch::randn({size, 5, 3})};
}

std::vector<torch::Tensor> UniqueParameters(torch::nn::Module& net) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : net.parameters()) {
    bool seen = false;
    for (const torch::Tensor& q : out) seen = seen || q.is_same(p);
    if (!seen) out.push_back(p);
  }
  return out;
}

torch::Tensor Loss(TestNet& net, const torch::Tensor& x, const torch::Tensor& y) {
  // The batches are made on the host; the net may live on a device.
  const torch::Tensor p = net.parameters().front();
  return torch::mse_loss(net.forward(x.to(p.device(), p.scalar_type())).to(torch::kFloat),
                         y.to(p.device()));
}

absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> JoinGroupFromEnv(
    const comm::GroupOptions& options) {
  auto info = comm::RendezvousFromEnv();
  if (!info.ok()) return info.status();
  return comm::ProcessGroup::Create(*info, options);
}

ReferenceRun RunReference(ModelKind kind, const ReferenceOptions& o) {
  ReferenceRun run;
  run.net = MakeNet(kind);
  run.net->to(o.device);
  // Once each: a tied matrix listed twice would be stepped twice.
  std::vector<torch::Tensor> params = UniqueParameters(*run.net);
  ReferenceStep step_fn = o.make_optimizer ? o.make_optimizer(params) : nullptr;
  if (!step_fn) {
    auto adam = std::make_shared<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
    step_fn = [adam] { adam->step(); };
  }
  for (int step = 0; step < o.steps; ++step) {
    Batch b = GlobalBatch(kind, step, o.batch);
    for (torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss = Loss(*run.net, b.x, b.y);
    run.losses.push_back(loss.item<double>());
    loss.backward();
    if (o.clip > 0) torch::nn::utils::clip_grad_norm_(params, o.clip);
    step_fn();
  }
  return run;
}

absl::Status MatchesReference(Engine& engine, TestNet& net, ModelKind kind,
                              const ReferenceOptions& options) {
  ReferenceRun ref = RunReference(kind, options);
  ZT_ASSIGN_OR_RETURN(auto gathered, engine.GatherParameters(UniqueParameters(net)));
  const std::string diff = CompareParams(net, *ref.net, 1e-6, 1e-5);
  ZT_RETURN_IF_ERROR(gathered->Close());
  if (!diff.empty()) return absl::InternalError(absl::StrCat("parameters differ: ", diff));
  return absl::OkStatus();
}

std::string CompareParams(TestNet& got, TestNet& want, double atol, double rtol) {
  auto want_params = want.named_parameters();
  double worst = 0;
  std::string report;
  for (const auto& item : got.named_parameters()) {
    torch::Tensor g = item.value().detach().to(torch::kCPU, torch::kFloat);
    torch::Tensor w = want_params[item.key()].detach().to(torch::kCPU);
    torch::Tensor excess = (g - w).abs() - (atol + rtol * w.abs());
    const double e = excess.max().item<double>();
    if (e > worst) {
      const int64_t i = excess.argmax().item<int64_t>();
      worst = e;
      report = absl::StrCat(item.key(), "[", i, "]: got ", g.reshape({-1})[i].item<double>(),
                            " want ", w.reshape({-1})[i].item<double>());
    }
  }
  return report;
}

absl::Status TrainSteps(Engine& engine, TestNet& net, ModelKind kind, int steps, int64_t batch) {
  return TrainStepRange(engine, net, kind, 0, steps, batch);
}

absl::Status TrainStepRange(Engine& engine, TestNet& net, ModelKind kind, int first, int last,
                            int64_t batch, std::vector<double>* losses) {
  for (int step = first; step < last; ++step) {
    Batch b = GlobalBatch(kind, step, batch);
    torch::Tensor loss;
    {
      auto forward = engine.BeginForward();
      loss = Loss(net, b.x, b.y);
    }
    if (losses != nullptr) losses->push_back(loss.item<double>());
    ZT_RETURN_IF_ERROR(engine.Backward(loss));
    ZT_RETURN_IF_ERROR(engine.Step());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GatheredDifference(Engine& got_engine, TestNet& got,
                                               Engine& want_engine, TestNet& want) {
  ZT_ASSIGN_OR_RETURN(auto want_params, want_engine.GatherParameters(UniqueParameters(want)));
  ZT_ASSIGN_OR_RETURN(auto got_params, got_engine.GatherParameters(UniqueParameters(got)));
  const std::string diff = CompareParams(got, want, 0, 0);
  ZT_RETURN_IF_ERROR(got_params->Close());
  ZT_RETURN_IF_ERROR(want_params->Close());
  return diff;
}

}  // namespace zerotrain::engine::testing
