// Tiny networks, data and the torch::optim::AdamW reference for the engine tests.
#include "trainer/test_models.h"

#include "absl/strings/str_cat.h"

namespace zerotrain::trainer::testing {
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

// Pre-norm single-head attention and MLP with residuals, then a head: 875 parameters.
struct Block : TestNet {
  static constexpr int64_t kDim = 8;
  Block() {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    // No qkv bias: the key bias gets a gradient that is exactly zero in real arithmetic, i.e.
    // pure rounding noise that Adam would amplify to full-size updates.
    qkv = register_module(
        "qkv", torch::nn::Linear(torch::nn::LinearOptions(kDim, 3 * kDim).bias(false)));
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

}  // namespace

const char* ModelName(ModelKind kind) { return kind == ModelKind::kMlp ? "mlp" : "transformer"; }

std::shared_ptr<TestNet> MakeNet(ModelKind kind) {
  torch::manual_seed(0);
  if (kind == ModelKind::kMlp) return std::make_shared<Mlp>();
  return std::make_shared<Block>();
}

Batch GlobalBatch(ModelKind kind, int step, int64_t size) {
  torch::manual_seed(1000 + step);
  if (kind == ModelKind::kMlp) return {torch::randn({size, 10}), torch::randn({size, 5})};
  return {torch::randn({size, 5, Block::kDim}), torch::randn({size, 5, 3})};
}

torch::Tensor Loss(TestNet& net, const torch::Tensor& x, const torch::Tensor& y) {
  const auto dtype = net.parameters().front().scalar_type();
  return torch::mse_loss(net.forward(x.to(dtype)).to(torch::kFloat), y);
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
  torch::optim::AdamW adam(run.net->parameters(),
                           torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  for (int step = 0; step < o.steps; ++step) {
    Batch b = GlobalBatch(kind, step, o.batch);
    adam.zero_grad();
    torch::Tensor loss = Loss(*run.net, b.x, b.y);
    run.losses.push_back(loss.item<double>());
    loss.backward();
    if (o.clip > 0) torch::nn::utils::clip_grad_norm_(run.net->parameters(), o.clip);
    adam.step();
  }
  return run;
}

std::string CompareParams(TestNet& got, TestNet& want, double atol, double rtol) {
  auto want_params = want.named_parameters();
  double worst = 0;
  std::string report;
  for (const auto& item : got.named_parameters()) {
    torch::Tensor g = item.value().detach().to(torch::kFloat);
    torch::Tensor w = want_params[item.key()].detach();
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

}  // namespace zerotrain::trainer::testing
