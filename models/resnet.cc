// The ResNet module (resnet.h): torchvision's layout, initialisation and names.
#include "models/resnet.h"

#include <torch/nn/functional/batchnorm.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "recompute/activation_checkpoint.h"

namespace zerotrain::models {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

// BatchNorm whose running statistics a recomputation leaves alone: the block's first forward
// already counted this batch, and recompute/ runs the block again in backward.
at::Tensor Norm(torch::nn::BatchNorm2d& bn, const at::Tensor& x, bool update_stats) {
  if (update_stats || !bn->is_training()) return bn(x);
  const auto& o = bn->options;
  return F::batch_norm(x, at::Tensor(), at::Tensor(),
                       F::BatchNormFuncOptions()
                           .weight(bn->weight)
                           .bias(bn->bias)
                           .training(true)
                           .momentum(o.momentum().value_or(0.1))
                           .eps(o.eps()));
}

// A residual block, basic (two 3x3 convs) or bottleneck (1x1, 3x3 carrying the stride, 1x1 to
// 4x the width), with torchvision's names: conv1, bn1, conv2, bn2[, conv3, bn3][, downsample].
class Block : public torch::nn::Module {
 public:
  Block(int64_t in, int64_t planes, int64_t stride, bool bottleneck) : bottleneck_(bottleneck) {
    const int64_t out = bottleneck ? planes * 4 : planes;
    if (bottleneck) {
      conv1_ = register_module("conv1", Conv(in, planes, 1, 1));
      conv2_ = register_module("conv2", Conv(planes, planes, 3, stride));
      conv3_ = register_module("conv3", Conv(planes, out, 1, 1));
    } else {
      conv1_ = register_module("conv1", Conv(in, planes, 3, stride));
      conv2_ = register_module("conv2", Conv(planes, planes, 3, 1));
    }
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(planes));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(bottleneck ? planes : out));
    if (bottleneck) bn3_ = register_module("bn3", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      down_conv_ = Conv(in, out, 1, stride);
      down_bn_ = torch::nn::BatchNorm2d(out);
      down_ = register_module("downsample", torch::nn::Sequential(down_conv_, down_bn_));
    }
  }

  at::Tensor forward(const at::Tensor& x, bool update_stats = true) {
    at::Tensor y = torch::relu(Norm(bn1_, conv1_(x), update_stats));
    y = Norm(bn2_, conv2_(y), update_stats);
    if (bottleneck_) y = Norm(bn3_, conv3_(torch::relu(y)), update_stats);
    const at::Tensor identity = down_ ? Norm(down_bn_, down_conv_(x), update_stats) : x;
    return torch::relu(y + identity);
  }

 private:
  bool bottleneck_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr}, down_conv_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr}, down_bn_{nullptr};
  torch::nn::Sequential down_{nullptr};
};

std::vector<int64_t> Layers(int64_t depth) {
  return depth == 50 ? std::vector<int64_t>{3, 4, 6, 3} : std::vector<int64_t>{2, 2, 2, 2};
}

// torchvision's: He-normal (fan_out) convolutions, BatchNorm at 1 and 0, Linear's default.
void InitOne(torch::nn::Module& m) {
  if (auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(&m)) {
    torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
  } else if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(&m)) {
    bn->weight.fill_(1.0);
    bn->bias.zero_();
  }
}

void InitWeights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  // modules(include_self) needs the module held by a shared_ptr, which a constructor's is not.
  InitOne(module);
  for (auto& m : module.modules(/*include_self=*/false)) InitOne(*m);
}

}  // namespace

struct ResNet::Parts {
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
  torch::nn::Linear fc{nullptr};
};

absl::Status ValidateResNetOptions(const ResNetOptions& o) {
  if (o.depth != 18 && o.depth != 50) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.depth must be 18 or 50 (ResNet-18, ResNet-50), got ", o.depth));
  }
  if (o.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.num_classes must be positive, got ", o.num_classes));
  }
  if (o.checkpoint_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.checkpoint_every must be 0 or positive, got ", o.checkpoint_every));
  }
  return absl::OkStatus();
}

int64_t ResNetParameterCount(const ResNetOptions& o) {
  const bool bottleneck = o.depth == 50;
  const int64_t expansion = bottleneck ? 4 : 1;
  int64_t count = 3 * 64 * 7 * 7 + 2 * 64;  // conv1, bn1
  int64_t in = 64;
  const std::vector<int64_t> layers = Layers(o.depth);
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = 64 << s, out = planes * expansion;
    for (int64_t b = 0; b < layers[s]; ++b) {
      if (bottleneck) {
        count +=
            in * planes + 2 * planes + planes * planes * 9 + 2 * planes + planes * out + 2 * out;
      } else {
        count += in * planes * 9 + 2 * planes + planes * planes * 9 + 2 * planes;
      }
      if (b == 0 && (s > 0 || in != out)) count += in * out + 2 * out;  // downsample
      in = out;
    }
  }
  return count + in * o.num_classes + o.num_classes;  // fc
}

ResNet::ResNet(const ResNetOptions& options)
    : options_(options), parts_(std::make_shared<Parts>()) {
  const absl::Status valid = ValidateResNetOptions(options);
  TORCH_CHECK(valid.ok(), valid.ToString());
  Parts& p = *parts_;
  auto built = [&](const std::string& name, torch::nn::Module& m) {
    if (!options.after_submodule) return;
    InitWeights(m);
    options.after_submodule(name, m);
  };
  p.conv1 = register_module("conv1", Conv(3, 64, 7, 2));
  built("conv1", *p.conv1);
  p.bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
  built("bn1", *p.bn1);
  const bool bottleneck = options.depth == 50;
  int64_t in = 64;
  const std::vector<int64_t> layers = Layers(options.depth);
  for (int s = 0; s < 4; ++s) {
    auto stage = register_module(absl::StrCat("layer", s + 1), torch::nn::ModuleList());
    const int64_t planes = 64 << s;
    for (int64_t b = 0; b < layers[s]; ++b) {
      p.blocks.push_back(std::make_shared<Block>(in, planes, b == 0 && s > 0 ? 2 : 1, bottleneck));
      stage->push_back(p.blocks.back());
      built(absl::StrCat("layer", s + 1, ".", b), *p.blocks.back());
      in = bottleneck ? planes * 4 : planes;
    }
  }
  p.fc = register_module("fc", torch::nn::Linear(in, options.num_classes));
  built("fc", *p.fc);
  if (!options.after_submodule) InitWeights(*this);
}

at::Tensor ResNet::forward(const at::Tensor& images) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == 3, "ResNet expects images [B, 3, H, W], got ",
              images.sizes());
  Parts& p = *parts_;
  at::Tensor x = torch::relu(p.bn1(p.conv1(images)));
  x = F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
  recompute::ActivationCheckpointOptions ckpt;
  ckpt.cpu_checkpointing = options_.cpu_checkpointing;
  const int64_t k = options_.checkpoint_every;
  for (size_t i = 0; i < p.blocks.size(); ++i) {
    std::shared_ptr<Block> block = p.blocks[i];
    if (k > 0 && is_training() && static_cast<int64_t>(i) % k == 0 &&
        torch::GradMode::is_enabled()) {
      auto calls = std::make_shared<int>(0);
      x = recompute::CheckpointBlock(
          [block, calls](const at::Tensor& in) { return block->forward(in, (*calls)++ == 0); }, x,
          ckpt);
    } else {
      x = block->forward(x);
    }
  }
  x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
  return p.fc(x);
}

absl::StatusOr<std::shared_ptr<ResNet>> MakeResNet(const ResNetOptions& options) {
  if (absl::Status s = ValidateResNetOptions(options); !s.ok()) return s;
  try {
    return std::make_shared<ResNet>(options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the ResNet: ", e.what()));
  }
}

}  // namespace zerotrain::models
