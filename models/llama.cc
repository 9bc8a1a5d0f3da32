// The Llama module: options checks, the parameter-count formula and the forward pass, each
// written to compute what Hugging Face transformers' modeling_llama.py does, op for op where the
// order of floating-point operations could change a logit.
#include "models/llama.h"

#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/gpt.h"
#include "recompute/activation_checkpoint.h"

namespace zerotrain::models {
namespace {

namespace F = torch::nn::functional;

int64_t KvHeads(const LlamaOptions& o) { return o.n_kv_head > 0 ? o.n_kv_head : o.n_head; }

int64_t IntermediateSize(const LlamaOptions& o) {
  return o.intermediate_size > 0 ? o.intermediate_size : LlamaDefaultIntermediateSize(o.n_embd);
}

torch::nn::Linear Linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// HF's LlamaRMSNorm: normalised in fp32 whatever the input's dtype, cast back before the weight.
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t dim, double eps) : eps_(eps) {
    weight_ = register_parameter("weight", torch::ones({dim}));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor x32 = x.to(torch::kFloat);
    x32 = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight_ * x32.to(x.scalar_type());
  }

 private:
  double eps_;
  at::Tensor weight_;
};

// cos and sin of every (position, frequency) angle, [T, head_dim], in the parameters' dtype.
struct Rotary {
  at::Tensor cos, sin;
};

// HF's default rotary embedding. Made in fp32 on every forward rather than kept as a buffer
// (HF's inv_freq is not in its state dict either), so .to(dtype) cannot round the frequencies.
Rotary RotaryTables(int64_t t, int64_t head_dim, double theta, const at::Tensor& like) {
  const auto on_device = torch::TensorOptions().device(like.device());
  at::Tensor exponent =
      torch::arange(0, head_dim, 2, on_device.dtype(torch::kLong)).to(torch::kFloat) / head_dim;
  // Python's 1.0 / t is t.reciprocal() * 1.0.
  at::Tensor inv_freq = torch::reciprocal(torch::pow(c10::Scalar(theta), exponent));
  at::Tensor positions = torch::arange(t, on_device.dtype(torch::kLong)).to(torch::kFloat);
  at::Tensor freqs = torch::outer(positions, inv_freq);  // HF's K = 1 matmul: the same products
  at::Tensor emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos().to(like.scalar_type()), emb.sin().to(like.scalar_type())};
}

// x [B, H, T, D] rotated in the halves convention: dimension j pairs with j + D/2.
at::Tensor ApplyRotary(const at::Tensor& x, const Rotary& rope) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * rope.cos + rotated * rope.sin;
}

// HF's repeat_kv: [B, KV, T, D] -> [B, KV * n_rep, T, D], kv head h serving query heads
// h * n_rep .. h * n_rep + n_rep - 1.
at::Tensor RepeatKv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t b = x.size(0), kv = x.size(1), t = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, kv, n_rep, t, d}).reshape({b, kv * n_rep, t, d});
}

class Attention : public torch::nn::Module {
 public:
  explicit Attention(const LlamaOptions& o)
      : n_head_(o.n_head), n_kv_head_(KvHeads(o)), head_dim_(o.n_embd / o.n_head) {
    q_proj_ = register_module("q_proj", Linear(o.n_embd, n_head_ * head_dim_));
    k_proj_ = register_module("k_proj", Linear(o.n_embd, n_kv_head_ * head_dim_));
    v_proj_ = register_module("v_proj", Linear(o.n_embd, n_kv_head_ * head_dim_));
    o_proj_ = register_module("o_proj", Linear(n_head_ * head_dim_, o.n_embd));
  }

  at::Tensor forward(const at::Tensor& x, const Rotary& rope) {
    const int64_t b = x.size(0), t = x.size(1);
    auto heads = [&](const at::Tensor& m, int64_t n) {
      return m.view({b, t, n, head_dim_}).transpose(1, 2);
    };
    const int64_t n_rep = n_head_ / n_kv_head_;
    at::Tensor q = ApplyRotary(heads(q_proj_(x), n_head_), rope);
    at::Tensor k = RepeatKv(ApplyRotary(heads(k_proj_(x), n_kv_head_), rope), n_rep);
    at::Tensor v = RepeatKv(heads(v_proj_(x), n_kv_head_), n_rep);
    at::Tensor y = CausalSelfAttention(q, k, v, /*dropout_p=*/0.0);
    return o_proj_(y.transpose(1, 2).reshape({b, t, n_head_ * head_dim_}));
  }

 private:
  int64_t n_head_, n_kv_head_, head_dim_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
};

// SwiGLU.
class Mlp : public torch::nn::Module {
 public:
  explicit Mlp(const LlamaOptions& o) {
    const int64_t inter = IntermediateSize(o);
    gate_proj_ = register_module("gate_proj", Linear(o.n_embd, inter));
    up_proj_ = register_module("up_proj", Linear(o.n_embd, inter));
    down_proj_ = register_module("down_proj", Linear(inter, o.n_embd));
  }
  at::Tensor forward(const at::Tensor& x) {
    return down_proj_(torch::silu(gate_proj_(x)) * up_proj_(x));
  }

 private:
  torch::nn::Linear gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};

class DecoderLayer : public torch::nn::Module {
 public:
  explicit DecoderLayer(const LlamaOptions& o) {
    input_layernorm_ =
        register_module("input_layernorm", std::make_shared<RmsNorm>(o.n_embd, o.rms_norm_eps));
    self_attn_ = register_module("self_attn", std::make_shared<Attention>(o));
    post_attention_layernorm_ = register_module(
        "post_attention_layernorm", std::make_shared<RmsNorm>(o.n_embd, o.rms_norm_eps));
    mlp_ = register_module("mlp", std::make_shared<Mlp>(o));
  }
  at::Tensor forward(const at::Tensor& x, const Rotary& rope) {
    at::Tensor h = x + self_attn_->forward(input_layernorm_->forward(x), rope);
    return h + mlp_->forward(post_attention_layernorm_->forward(h));
  }

 private:
  std::shared_ptr<RmsNorm> input_layernorm_, post_attention_layernorm_;
  std::shared_ptr<Attention> self_attn_;
  std::shared_ptr<Mlp> mlp_;
};

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("model.", message));
}

// HF's _init_weights for this model: N(0, 0.02) for every Linear weight and the embedding (the
// matrices); RMSNorm weights keep their ones.
void InitWeights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (at::Tensor& param : module.parameters()) {
    if (param.dim() >= 2) param.normal_(0.0, 0.02);
  }
}

}  // namespace

struct Llama::Parts {
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<RmsNorm> norm;
  torch::nn::Linear lm_head{nullptr};  // null when tied
};

int64_t LlamaDefaultIntermediateSize(int64_t n_embd) {
  constexpr int64_t kMultipleOf = 256;
  const int64_t hidden = 8 * n_embd / 3;  // Meta's int(2 * (4 * dim) / 3)
  return (hidden + kMultipleOf - 1) / kMultipleOf * kMultipleOf;
}

absl::Status ValidateLlamaOptions(const LlamaOptions& o) {
  for (auto [field, value] : {std::pair<const char*, int64_t>{"vocab_size", o.vocab_size},
                              {"block_size", o.block_size},
                              {"n_layer", o.n_layer},
                              {"n_head", o.n_head},
                              {"n_embd", o.n_embd}}) {
    if (value <= 0) return Invalid(absl::StrCat(field, " must be positive, got ", value));
  }
  if (o.vocab_size > kMaxVocabSize) {
    return Invalid(
        absl::StrCat("vocab_size must be at most ", kMaxVocabSize, ", got ", o.vocab_size));
  }
  if (o.n_kv_head < 0) {
    return Invalid(absl::StrCat("n_kv_head must be 0 (= n_head) or positive, got ", o.n_kv_head));
  }
  if (o.intermediate_size < 0) {
    return Invalid(absl::StrCat("intermediate_size must be 0 (the default) or positive, got ",
                                o.intermediate_size));
  }
  if (o.n_embd % o.n_head != 0) {
    return Invalid(
        absl::StrCat("n_embd (", o.n_embd, ") must be divisible by model.n_head (", o.n_head, ")"));
  }
  if (o.n_head % KvHeads(o) != 0) {
    return Invalid(absl::StrCat("n_head (", o.n_head, ") must be divisible by model.n_kv_head (",
                                o.n_kv_head, ")"));
  }
  if ((o.n_embd / o.n_head) % 2 != 0) {
    return Invalid(absl::StrCat("n_embd / model.n_head (", o.n_embd, " / ", o.n_head,
                                ") must be even: rotary embeddings turn pairs of dimensions"));
  }
  if (!(o.rope_theta > 0)) {
    return Invalid(absl::StrCat("rope_theta must be positive, got ", o.rope_theta));
  }
  if (!(o.rms_norm_eps > 0)) {
    return Invalid(absl::StrCat("rms_norm_eps must be positive, got ", o.rms_norm_eps));
  }
  if (o.checkpoint_every < 0) {
    return Invalid(absl::StrCat(
        "checkpoint_every must be 0 (off) or a positive block interval, got ", o.checkpoint_every));
  }
  return absl::OkStatus();
}

int64_t LlamaParameterCount(const LlamaOptions& o) {
  const int64_t c = o.n_embd, kv_dim = KvHeads(o) * (o.n_embd / o.n_head);
  // Per layer: q_proj and o_proj (c * c each, as n_head * head_dim = c), k_proj and v_proj
  // (kv_dim * c each), gate/up/down (3 * c * intermediate) and two RMSNorms (c each). Then the
  // embedding (V * c), the final RMSNorm (c) and, untied, lm_head (V * c).
  const int64_t per_layer = 2 * c * c + 2 * kv_dim * c + 3 * c * IntermediateSize(o) + 2 * c;
  const int64_t embeddings = (o.tie_word_embeddings ? 1 : 2) * o.vocab_size * c;
  return embeddings + o.n_layer * per_layer + c;
}

Llama::Llama(const LlamaOptions& options) : options_(options), parts_(std::make_shared<Parts>()) {
  const absl::Status valid = ValidateLlamaOptions(options);
  TORCH_CHECK(valid.ok(), valid.ToString());
  Parts& p = *parts_;
  const auto& hook = options.after_submodule;
  // With a hook, each submodule is initialised and handed over as soon as it exists.
  auto built = [&](const std::string& name, torch::nn::Module& m) {
    if (!hook) return;
    InitWeights(m);
    hook(name, m);
  };
  // HF's LlamaModel, the "model." of every name but lm_head's; it has no parameters of its own.
  auto model = register_module("model", std::make_shared<torch::nn::Module>());
  p.embed_tokens = model->register_module("embed_tokens",
                                          torch::nn::Embedding(options.vocab_size, options.n_embd));
  built("model.embed_tokens", *p.embed_tokens);
  auto layers = model->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.n_layer; ++i) {
    p.layers.push_back(std::make_shared<DecoderLayer>(options));
    layers->push_back(p.layers.back());
    built("model.layers." + std::to_string(i), *p.layers.back());
  }
  p.norm = model->register_module("norm",
                                  std::make_shared<RmsNorm>(options.n_embd, options.rms_norm_eps));
  built("model.norm", *p.norm);
  if (!options.tie_word_embeddings) {
    p.lm_head = register_module("lm_head", Linear(options.n_embd, options.vocab_size));
    built("lm_head", *p.lm_head);
  }
  if (!hook) InitWeights(*this);
}

at::Tensor Llama::forward(const at::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "Llama expects token ids [B, T], got ", tokens.sizes());
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= options_.block_size, "sequence length ", t, " exceeds model.block_size ",
              options_.block_size);
  Parts& p = *parts_;
  at::Tensor x = p.embed_tokens(tokens);
  const Rotary rope =
      RotaryTables(t, options_.n_embd / options_.n_head, options_.rope_theta, /*like=*/x);
  recompute::ActivationCheckpointOptions ckpt;
  ckpt.cpu_checkpointing = options_.cpu_checkpointing;
  ckpt.profile = options_.profile_checkpointing;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    DecoderLayer& layer = *p.layers[i];
    const int64_t k = options_.checkpoint_every;
    if (k > 0 && is_training() && static_cast<int64_t>(i) % k == 0 &&
        torch::GradMode::is_enabled()) {
      // rope by value: the block is kept until backward.
      x = recompute::CheckpointBlock(
          [&layer, rope](const at::Tensor& in) { return layer.forward(in, rope); }, x, ckpt);
    } else {
      x = layer.forward(x, rope);
    }
  }
  at::Tensor h = p.norm->forward(x);
  // Tied: the embedding's weight used directly, so it stays one parameter.
  return !p.lm_head.is_empty() ? p.lm_head(h) : F::linear(h, p.embed_tokens->weight);
}

absl::StatusOr<std::shared_ptr<Llama>> MakeLlama(const LlamaOptions& options) {
  if (absl::Status s = ValidateLlamaOptions(options); !s.ok()) return s;
  try {
    return std::make_shared<Llama>(options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the Llama model: ", e.what()));
  }
}

}  // namespace zerotrain::models
