// The GPT module: options checks, the parameter-count formula and the forward pass.
#include "models/gpt.h"

#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "recompute/activation_checkpoint.h"

namespace zerotrain::models {
namespace {

namespace F = torch::nn::functional;

absl::Status Positive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model.", field, " must be positive, got ", value));
}

// Causal multi-head self-attention: one fused q/k/v projection, then an output projection.
class SelfAttention : public torch::nn::Module {
 public:
  explicit SelfAttention(const GptOptions& o) : n_head_(o.n_head), dropout_(o.dropout) {
    c_attn_ = register_module("c_attn", torch::nn::Linear(o.n_embd, 3 * o.n_embd));
    c_proj_ = register_module("c_proj", torch::nn::Linear(o.n_embd, o.n_embd));
    resid_dropout_ = register_module("resid_dropout", torch::nn::Dropout(o.dropout));
  }

  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
    auto qkv = c_attn_(x).split(c, /*dim=*/2);
    auto heads = [&](const at::Tensor& m) {
      return m.view({b, t, n_head_, c / n_head_}).transpose(1, 2);
    };
    at::Tensor y = CausalSelfAttention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                       is_training() ? dropout_ : 0.0);
    y = y.transpose(1, 2).contiguous().view({b, t, c});
    return resid_dropout_(c_proj_(y));
  }

 private:
  int64_t n_head_;
  double dropout_;
  torch::nn::Linear c_attn_{nullptr}, c_proj_{nullptr};
  torch::nn::Dropout resid_dropout_{nullptr};
};

class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const GptOptions& o) : gelu_(o.gelu_tanh ? "tanh" : "none") {
    c_fc_ = register_module("c_fc", torch::nn::Linear(o.n_embd, 4 * o.n_embd));
    c_proj_ = register_module("c_proj", torch::nn::Linear(4 * o.n_embd, o.n_embd));
    dropout_ = register_module("dropout", torch::nn::Dropout(o.dropout));
  }
  at::Tensor forward(const at::Tensor& x) {
    return dropout_(c_proj_(torch::gelu(c_fc_(x), gelu_)));
  }

 private:
  std::string gelu_;  // at::gelu's `approximate`
  torch::nn::Linear c_fc_{nullptr}, c_proj_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};

class Block : public torch::nn::Module {
 public:
  explicit Block(const GptOptions& o) {
    ln_1_ = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.n_embd})));
    attn_ = register_module("attn", std::make_shared<SelfAttention>(o));
    ln_2_ = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.n_embd})));
    mlp_ = register_module("mlp", std::make_shared<Mlp>(o));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x + attn_->forward(ln_1_(x));
    return h + mlp_->forward(ln_2_(h));
  }

 private:
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  std::shared_ptr<SelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

}  // namespace

struct Gpt::Parts {
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};

absl::Status ValidateGptOptions(const GptOptions& o) {
  for (auto [field, value] : {std::pair<const char*, int64_t>{"vocab_size", o.vocab_size},
                              {"block_size", o.block_size},
                              {"n_layer", o.n_layer},
                              {"n_head", o.n_head},
                              {"n_embd", o.n_embd}}) {
    if (absl::Status s = Positive(field, value); !s.ok()) return s;
  }
  if (o.vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.vocab_size must be at most ", kMaxVocabSize, ", got ", o.vocab_size));
  }
  if (o.n_embd % o.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.n_embd (", o.n_embd, ") must be divisible by model.n_head (", o.n_head, ")"));
  }
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.dropout must be in [0, 1), got ", o.dropout));
  }
  if (o.checkpoint_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.checkpoint_every must be 0 (off) or a positive block interval, got ",
                     o.checkpoint_every));
  }
  return absl::OkStatus();
}

int64_t GptParameterCount(const GptOptions& o) {
  const int64_t c = o.n_embd;
  // Per block: two LayerNorms (2c each), q/k/v (3c*c + 3c), attention output (c*c + c),
  // MLP up (4c*c + 4c) and down (4c*c + c).
  const int64_t per_block = 12 * c * c + 13 * c;
  return o.vocab_size * c + o.block_size * c + o.n_layer * per_block + 2 * c;
}

namespace {

// GPT-2's initialisation: N(0, 0.02) weights, zero biases, and residual projections scaled down
// by sqrt(2 * n_layer) so the residual stream does not grow with depth. LayerNorms keep ones and
// zeros.
void InitWeights(torch::nn::Module& module, int64_t n_layer) {
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * n_layer);
  for (auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    at::Tensor& param = item.value();
    if (name.find("ln_") != std::string::npos) continue;
    if (param.dim() == 1) {
      param.zero_();
    } else if (name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0) {
      param.normal_(0.0, residual_std);
    } else {
      param.normal_(0.0, 0.02);
    }
  }
}

}  // namespace

Gpt::Gpt(const GptOptions& options) : options_(options), parts_(std::make_shared<Parts>()) {
  const absl::Status valid = ValidateGptOptions(options);
  TORCH_CHECK(valid.ok(), valid.ToString());
  Parts& p = *parts_;
  const auto& hook = options.after_submodule;
  // With a hook, each submodule is initialised and handed over as soon as it exists.
  auto built = [&](const std::string& name, torch::nn::Module& m, bool init) {
    if (!hook) return;
    if (init) InitWeights(m, options.n_layer);
    hook(name, m);
  };
  p.wte = register_module("wte", torch::nn::Embedding(options.vocab_size, options.n_embd));
  built("wte", *p.wte, true);
  p.wpe = register_module("wpe", torch::nn::Embedding(options.block_size, options.n_embd));
  built("wpe", *p.wpe, true);
  p.drop = register_module("drop", torch::nn::Dropout(options.dropout));
  auto h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.n_layer; ++i) {
    p.blocks.push_back(std::make_shared<Block>(options));
    h->push_back(p.blocks.back());
    built("h." + std::to_string(i), *p.blocks.back(), true);
  }
  p.ln_f =
      register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.n_embd})));
  built("ln_f", *p.ln_f, false);
  if (!hook) InitWeights(*this, options.n_layer);
}

at::Tensor Gpt::forward(const at::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "Gpt expects token ids [B, T], got ", tokens.sizes());
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= options_.block_size, "sequence length ", t, " exceeds model.block_size ",
              options_.block_size);
  Parts& p = *parts_;
  at::Tensor positions = torch::arange(t, tokens.options().dtype(torch::kLong));
  at::Tensor x = p.drop(p.wte(tokens) + p.wpe(positions));
  recompute::ActivationCheckpointOptions ckpt;
  ckpt.cpu_checkpointing = options_.cpu_checkpointing;
  ckpt.profile = options_.profile_checkpointing;
  for (size_t i = 0; i < p.blocks.size(); ++i) {
    Block& block = *p.blocks[i];
    const int64_t k = options_.checkpoint_every;
    if (k > 0 && is_training() && static_cast<int64_t>(i) % k == 0 &&
        torch::GradMode::is_enabled()) {
      x = recompute::CheckpointBlock([&block](const at::Tensor& in) { return block.forward(in); },
                                     x, ckpt);
    } else {
      x = block.forward(x);
    }
  }
  // Tied output: the token embedding's weight, used directly so it stays one parameter.
  return F::linear(p.ln_f(x), p.wte->weight);
}

absl::StatusOr<std::shared_ptr<Gpt>> MakeGpt(const GptOptions& options) {
  if (absl::Status s = ValidateGptOptions(options); !s.ok()) return s;
  try {
    return std::make_shared<Gpt>(options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the GPT model: ", e.what()));
  }
}

at::Tensor CausalSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               double dropout_p) {
  // is_causal builds the mask inside the kernel, so no mask tensor of another dtype or device
  // appears, and the fused CUDA kernels (which take no explicit mask) stay eligible.
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                          /*is_causal=*/true);
}

at::Tensor GptLoss(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t v = logits.size(-1);
  return F::cross_entropy(logits.to(torch::kFloat).reshape({-1, v}), targets.reshape({-1}));
}

}  // namespace zerotrain::models
