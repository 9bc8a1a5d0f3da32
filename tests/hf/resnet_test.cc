// zerotrain's ResNet against torchvision itself (make_resnets.py, run in the project venv): the
// state dicts of ResNet-18 and ResNet-50 load name for name (parameters and BatchNorm buffers),
// the parameter count is torchvision's, eval-mode and train-mode logits are torchvision's, and
// so are the running statistics a training forward leaves. Recomputing the residual blocks gives
// the plain forward's loss, gradients and running statistics (a recomputation does not count a
// batch twice).
#include <gtest/gtest.h>
#include <torch/types.h>

#include <map>
#include <set>
#include <string>

#include "hf/safetensors.h"
#include "models/resnet.h"
#include "tests/deepspeed/oracle.h"
#include "tests/hf/hf_reference.h"

namespace zerotrain::trainer {
namespace {

std::string Dir() {
  static const std::string* dir = [] {
    auto* d = new std::string(zerotrain::testing::OracleTempDir("resnets"));
    auto out = zerotrain::testing::RunOracle("tests/hf/make_resnets.py", {*d});
    EXPECT_TRUE(out.ok()) << out.status();
    return d;
  }();
  return *dir;
}

at::Tensor Expected(const std::string& name) {
  auto t = zerotrain::testing::ReadTensor(Dir() + "/expected_resnets.safetensors", name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : at::Tensor();
}

// Every parameter and buffer of the model from torchvision's state dict, by name.
void LoadState(models::ResNet& model, const std::string& file) {
  auto header = hf::ReadSafetensorsHeader(file);
  ASSERT_TRUE(header.ok()) << header.status();
  std::map<std::string, at::Tensor> ours;
  for (auto& item : model.named_parameters()) ours[item.key()] = item.value();
  for (auto& item : model.named_buffers()) ours[item.key()] = item.value();
  std::set<std::string> theirs;
  torch::NoGradGuard no_grad;
  for (const auto& info : header->tensors) {
    theirs.insert(info.name);
    ASSERT_TRUE(ours.count(info.name)) << info.name << " is not in our ResNet";
    auto t = hf::ReadSafetensorsTensor(*header, info.name);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(ours[info.name].sizes(), t->sizes()) << info.name;
    ours[info.name].copy_(*t);
  }
  for (const auto& [name, t] : ours) EXPECT_TRUE(theirs.count(name)) << name << " is not theirs";
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want, const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-5 * std::max(1.0, scale)) << what;
}

TEST(ResNetTest, TorchvisionsStateDictLogitsAndRunningStatistics) {
  const at::Tensor images = Expected("images");
  for (int depth : {18, 50}) {
    SCOPED_TRACE(depth);
    const std::string name = "resnet" + std::to_string(depth);
    models::ResNetOptions o;
    o.depth = depth;
    o.num_classes = 10;
    models::ResNet model(o);
    int64_t numel = 0;
    for (const auto& p : model.parameters()) numel += p.numel();
    EXPECT_EQ(numel, Expected(name + ".params").item<int64_t>());
    EXPECT_EQ(models::ResNetParameterCount(o), numel);
    LoadState(model, Dir() + "/" + name + ".safetensors");
    torch::NoGradGuard no_grad;
    model.eval();
    ExpectClose(model.forward(images), Expected(name + ".eval"), "eval logits");
    model.train();
    ExpectClose(model.forward(images), Expected(name + ".train"), "train logits");
    ExpectClose(model.named_buffers()["bn1.running_mean"], Expected(name + ".bn1.running_mean"),
                "bn1.running_mean after a training forward");
    ExpectClose(model.named_buffers()["layer4.1.bn2.running_var"],
                Expected(name + ".layer4.1.bn2.running_var"), "layer4.1.bn2.running_var");
  }
}

TEST(ResNetTest, RecomputedBlocksGiveThePlainForwardsLossGradientsAndStatistics) {
  torch::manual_seed(3);
  const at::Tensor images = torch::randn({4, 3, 32, 32});
  const at::Tensor labels = torch::randint(0, 10, {4}, torch::kLong);
  std::map<std::string, at::Tensor> grads[2], buffers[2];
  double losses[2];
  for (int every : {0, 1}) {
    models::ResNetOptions o;
    o.num_classes = 10;
    o.checkpoint_every = every;
    torch::manual_seed(5);
    models::ResNet model(o);
    model.train();
    at::Tensor loss = torch::cross_entropy_loss(model.forward(images), labels);
    loss.backward();
    losses[every] = loss.item<double>();
    for (auto& item : model.named_parameters()) grads[every][item.key()] = item.value().grad();
    for (auto& item : model.named_buffers()) buffers[every][item.key()] = item.value().clone();
  }
  EXPECT_EQ(losses[1], losses[0]);
  for (const auto& [name, g] : grads[0]) {
    EXPECT_TRUE(torch::allclose(grads[1][name], g, 1e-5, 1e-6)) << name;
  }
  for (const auto& [name, b] : buffers[0]) {
    EXPECT_TRUE(torch::equal(buffers[1][name], b)) << name << ": counted once";
  }
}

TEST(ResNetTest, OptionsAreChecked) {
  models::ResNetOptions o;
  o.depth = 34;
  EXPECT_NE(models::ValidateResNetOptions(o).message().find("model.depth must be 18 or 50"),
            std::string::npos);
  o.depth = 18;
  o.num_classes = 0;
  EXPECT_FALSE(models::MakeResNet(o).ok());
}

}  // namespace
}  // namespace zerotrain::trainer
