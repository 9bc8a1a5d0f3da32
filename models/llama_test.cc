// Llama against independent references: the parameter-count formula against the module's own
// tensors and against published model sizes, the names against Hugging Face's state-dict keys,
// the forward against a per-head, pairwise-rotation forward written here with a double-precision
// rotary table, causality, bf16 against fp32, activation checkpointing against the plain
// forward, and the after_submodule hook's order.
#include "models/llama.h"

#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "recompute/activation_checkpoint.h"

namespace zerotrain::models {
namespace {

LlamaOptions Tiny(int64_t n_kv_head, bool tied) {
  LlamaOptions o;
  o.vocab_size = 50;
  o.block_size = 16;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_kv_head = n_kv_head;
  o.n_embd = 32;
  o.intermediate_size = 40;
  o.tie_word_embeddings = tied;
  return o;
}

// Six heads of 8 sharing 2 kv heads (3 query heads each), the default MLP width, another theta.
LlamaOptions Grouped(bool tied) {
  LlamaOptions o = Tiny(2, tied);
  o.n_head = 6;
  o.n_embd = 48;
  o.intermediate_size = 0;
  o.rope_theta = 500000.0;
  return o;
}

std::map<std::string, at::Tensor> Params(Llama& m) {
  std::map<std::string, at::Tensor> p;
  for (auto& item : m.named_parameters()) p[item.key()] = item.value();
  return p;
}

TEST(LlamaTest, ParameterCountMatchesTheModuleAndPublishedSizes) {
  for (const LlamaOptions& o :
       {LlamaOptions{}, Tiny(4, false), Tiny(1, true), Grouped(false), Grouped(true)}) {
    Llama m(o);
    int64_t numel = 0;
    std::set<const void*> storages;
    for (const auto& p : m.parameters()) {
      numel += p.numel();
      EXPECT_TRUE(storages.insert(p.data_ptr()).second) << "a tensor is listed twice";
    }
    EXPECT_EQ(LlamaParameterCount(o), numel);
  }
  // Meta's widths for LLaMA 7B, 13B and 65B.
  EXPECT_EQ(LlamaDefaultIntermediateSize(4096), 11008);
  EXPECT_EQ(LlamaDefaultIntermediateSize(5120), 13824);
  EXPECT_EQ(LlamaDefaultIntermediateSize(8192), 22016);
  // Too large to build: Llama-2-7B and TinyLlama-1.1B (4 kv heads), as their checkpoints count.
  LlamaOptions llama2;
  llama2.vocab_size = 32000, llama2.n_layer = 32, llama2.n_head = 32, llama2.n_embd = 4096;
  EXPECT_EQ(LlamaParameterCount(llama2), 6'738'415'616);
  LlamaOptions tiny_llama = llama2;
  tiny_llama.n_layer = 22, tiny_llama.n_embd = 2048, tiny_llama.n_kv_head = 4;
  tiny_llama.intermediate_size = 5632;
  EXPECT_EQ(LlamaParameterCount(tiny_llama), 1'100'048'384);
}

TEST(LlamaTest, NamesAndShapesAreHuggingFaces) {
  for (bool tied : {false, true}) {
    const LlamaOptions o = Grouped(tied);
    Llama m(o);
    const int64_t c = 48, kv = 2 * 8, inter = 256;
    std::map<std::string, std::vector<int64_t>> want = {{"model.embed_tokens.weight", {50, c}},
                                                        {"model.norm.weight", {c}}};
    if (!tied) want["lm_head.weight"] = {50, c};
    for (int i = 0; i < 2; ++i) {
      const std::string l = "model.layers." + std::to_string(i) + ".";
      want[l + "input_layernorm.weight"] = {c};
      want[l + "post_attention_layernorm.weight"] = {c};
      want[l + "self_attn.q_proj.weight"] = {c, c};
      want[l + "self_attn.k_proj.weight"] = {kv, c};
      want[l + "self_attn.v_proj.weight"] = {kv, c};
      want[l + "self_attn.o_proj.weight"] = {c, c};
      want[l + "mlp.gate_proj.weight"] = {inter, c};
      want[l + "mlp.up_proj.weight"] = {inter, c};
      want[l + "mlp.down_proj.weight"] = {c, inter};
    }
    std::map<std::string, std::vector<int64_t>> got;
    for (const auto& [name, t] : Params(m)) {
      got[name] = t.sizes().vec();
      // HF's initialisation: the norms at one, every matrix N(0, 0.02).
      if (t.dim() == 1) {
        EXPECT_TRUE(torch::equal(t, torch::ones_like(t))) << name;
      } else {
        EXPECT_NEAR(t.std().item<double>(), 0.02, 0.003) << name;
      }
    }
    EXPECT_EQ(got, want) << "tied " << tied;
  }
}

// Per (position, j): the angle pos / theta^(2j / D), in double.
std::pair<at::Tensor, at::Tensor> CosSin(int64_t t, int64_t d, double theta) {
  std::vector<float> cos, sin;
  for (int64_t pos = 0; pos < t; ++pos) {
    for (int64_t j = 0; j < d / 2; ++j) {
      const double angle = pos / std::pow(theta, 2.0 * j / d);
      cos.push_back(static_cast<float>(std::cos(angle)));
      sin.push_back(static_cast<float>(std::sin(angle)));
    }
  }
  return {torch::tensor(cos).view({t, d / 2}), torch::tensor(sin).view({t, d / 2})};
}

// x [B, T, D]: each pair (j, j + D/2) turned by its angle.
at::Tensor Rotate(const at::Tensor& x, const std::pair<at::Tensor, at::Tensor>& cs) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor a = x.slice(-1, 0, half), b = x.slice(-1, half);
  const auto& [cos, sin] = cs;
  return torch::cat({a * cos - b * sin, b * cos + a * sin}, -1);
}

// The forward written out with a loop over query heads, each reading kv head h / group, an
// explicit [T, T] mask, x / sqrt(mean square) norms and x * sigmoid(x) for SiLU.
at::Tensor ReferenceLogits(std::map<std::string, at::Tensor>& p, const LlamaOptions& o,
                           const at::Tensor& tokens) {
  const int64_t t = tokens.size(1), d = o.n_embd / o.n_head;
  const int64_t group = o.n_head / (o.n_kv_head > 0 ? o.n_kv_head : o.n_head);
  auto norm = [&](const at::Tensor& x, const std::string& n) {
    return x / torch::sqrt((x * x).mean(-1, true) + o.rms_norm_eps) * p[n + ".weight"];
  };
  auto lin = [&](const at::Tensor& x, const std::string& n) {
    return torch::matmul(x, p[n + ".weight"].t());
  };
  const auto cs = CosSin(t, d, o.rope_theta);
  const at::Tensor mask =
      torch::zeros({t, t}).masked_fill(torch::ones({t, t}).triu(1) > 0, -INFINITY);
  at::Tensor x = p["model.embed_tokens.weight"].index({tokens});
  for (int64_t l = 0; l < o.n_layer; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const at::Tensor in = norm(x, pre + "input_layernorm");
    const at::Tensor q = lin(in, pre + "self_attn.q_proj"), k = lin(in, pre + "self_attn.k_proj"),
                     v = lin(in, pre + "self_attn.v_proj");
    std::vector<at::Tensor> outs;
    for (int64_t h = 0; h < o.n_head; ++h) {
      const int64_t g = h / group;
      const at::Tensor qh = Rotate(q.slice(-1, h * d, (h + 1) * d), cs);
      const at::Tensor kh = Rotate(k.slice(-1, g * d, (g + 1) * d), cs);
      at::Tensor att = torch::matmul(qh, kh.transpose(-1, -2)) / std::sqrt(double(d)) + mask;
      outs.push_back(torch::matmul(torch::softmax(att, -1), v.slice(-1, g * d, (g + 1) * d)));
    }
    x = x + lin(torch::cat(outs, -1), pre + "self_attn.o_proj");
    const at::Tensor m = norm(x, pre + "post_attention_layernorm");
    const at::Tensor gate = lin(m, pre + "mlp.gate_proj");
    x = x + lin(gate * torch::sigmoid(gate) * lin(m, pre + "mlp.up_proj"), pre + "mlp.down_proj");
  }
  const std::string out = p.count("lm_head.weight") ? "lm_head" : "model.embed_tokens";
  return lin(norm(x, "model.norm"), out);
}

// Weights large enough that attention is far from uniform (so a wrong rotation or mask shows)
// and norm weights away from one (so an ignored one shows).
void Randomise(Llama& m) {
  torch::NoGradGuard g;
  for (auto& p : m.parameters()) {
    if (p.dim() == 1) p.uniform_(0.5, 1.5);
    if (p.dim() == 2) p.normal_(0.0, 1.0 / std::sqrt(double(p.size(1))));
  }
}

TEST(LlamaTest, ForwardMatchesPerHeadReference) {
  std::vector<LlamaOptions> cases = {Tiny(4, false), Tiny(1, true), Grouped(false), Grouped(true)};
  cases[0].rope_theta = 100.0;
  for (const LlamaOptions& o : cases) {
    SCOPED_TRACE(::testing::Message() << "n_head " << o.n_head << " n_kv_head " << o.n_kv_head
                                      << " tied " << o.tie_word_embeddings);
    torch::manual_seed(1);
    Llama m(o);
    Randomise(m);
    auto p = Params(m);
    torch::NoGradGuard g;
    for (int64_t t : {o.block_size, int64_t{7}}) {
      const at::Tensor tokens = torch::randint(0, o.vocab_size, {3, t}, torch::kLong);
      const at::Tensor got = m.forward(tokens), want = ReferenceLogits(p, o, tokens);
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{3, t, o.vocab_size}));
      EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max();
      // The comparison can see the rotation: another theta moves the logits.
      LlamaOptions other = o;
      other.rope_theta = o.rope_theta * 2;
      EXPECT_FALSE(torch::allclose(ReferenceLogits(p, other, tokens), want, 1e-3, 1e-3));
    }
  }
}

TEST(LlamaTest, EarlierLogitsIgnoreLaterTokens) {
  torch::manual_seed(2);
  const LlamaOptions o = Grouped(false);
  Llama m(o);
  Randomise(m);
  torch::NoGradGuard g;
  at::Tensor a = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
  at::Tensor b = a.clone();
  b.index_put_({torch::indexing::Slice(), 10}, (a.select(1, 10) + 1) % o.vocab_size);
  at::Tensor la = m.forward(a), lb = m.forward(b);
  EXPECT_TRUE(torch::allclose(la.slice(1, 0, 10), lb.slice(1, 0, 10), 0, 1e-6));
  EXPECT_FALSE(torch::allclose(la.slice(1, 10), lb.slice(1, 10), 0, 1e-6));
  try {
    m.forward(torch::zeros({1, o.block_size + 1}, torch::kLong));
    ADD_FAILURE() << "a sequence longer than block_size ran";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.block_size 16"), std::string::npos) << e.what();
  }
}

TEST(LlamaTest, Bf16TracksFp32) {
  const LlamaOptions o = Grouped(true);
  torch::manual_seed(3);
  Llama fp32(o);
  torch::manual_seed(3);
  Llama bf16(o);
  bf16.to(torch::kBFloat16);
  const at::Tensor tokens = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
  const at::Tensor l32 = fp32.forward(tokens), l16 = bf16.forward(tokens);
  EXPECT_EQ(l16.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::allclose(l16.to(torch::kFloat), l32, 2e-2, 2e-2))
      << (l16.to(torch::kFloat) - l32).abs().max();
  l16.to(torch::kFloat).square().sum().backward();
  for (const auto& p : bf16.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kBFloat16);
  }
}

// Loss and gradients of one step with the given options, after seeding the global RNG.
std::pair<at::Tensor, std::vector<at::Tensor>> LossAndGrads(const LlamaOptions& o) {
  torch::manual_seed(4);
  Llama m(o);
  Randomise(m);
  const at::Tensor tokens = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
  const at::Tensor targets = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
  at::Tensor loss = GptLoss(m.forward(tokens), targets);
  loss.backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : m.parameters()) grads.push_back(p.grad().clone());
  return {loss.detach(), grads};
}

TEST(LlamaTest, CheckpointingGivesTheSameLossAndGradients) {
  for (bool tied : {false, true}) {
    LlamaOptions o = Grouped(tied);
    o.n_layer = 3;
    auto [loss, grads] = LossAndGrads(o);
    o.checkpoint_every = 1;
    o.profile_checkpointing = true;
    recompute::ResetRecomputeStats();
    auto [ck_loss, ck_grads] = LossAndGrads(o);
    EXPECT_EQ(recompute::GetRecomputeStats().recomputations, 3);
    EXPECT_TRUE(torch::equal(loss, ck_loss)) << "tied " << tied;
    ASSERT_EQ(grads.size(), ck_grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_GT(grads[i].abs().max().item<double>(), 0) << i;
      EXPECT_TRUE(torch::equal(grads[i], ck_grads[i])) << "parameter " << i << " tied " << tied;
    }
  }
}

void ExpectError(const LlamaOptions& o, const std::string& text) {
  const absl::Status s = ValidateLlamaOptions(o);
  EXPECT_NE(s.message().find(text), std::string::npos) << s;
  EXPECT_FALSE(MakeLlama(o).ok());
  EXPECT_THROW(Llama{o}, c10::Error);
}

TEST(LlamaTest, ValidateNamesFieldAndValue) {
  LlamaOptions o = Tiny(3, false);
  ExpectError(o, "model.n_head (4) must be divisible by model.n_kv_head (3)");
  o = Tiny(-1, false);
  ExpectError(o, "model.n_kv_head must be 0 (= n_head) or positive, got -1");
  o = Tiny(0, false);
  o.n_embd = 20;  // head_dim 5
  ExpectError(o, "model.n_embd / model.n_head (20 / 4) must be even");
  o = Tiny(0, false);
  o.rope_theta = 0;
  ExpectError(o, "model.rope_theta must be positive, got 0");
  o.rope_theta = -2.5;
  ExpectError(o, "model.rope_theta must be positive, got -2.5");
  o = Tiny(0, false);
  o.rms_norm_eps = 0;
  ExpectError(o, "model.rms_norm_eps must be positive, got 0");
  o = Tiny(0, false);
  o.intermediate_size = -1;
  ExpectError(o, "model.intermediate_size must be 0 (the default) or positive, got -1");
  o = Tiny(0, false);
  o.vocab_size = int64_t{1} << 31;
  ExpectError(o, "model.vocab_size must be at most 2147483647, got 2147483648");
  o.vocab_size = 100'000;  // past uint16
  EXPECT_TRUE(ValidateLlamaOptions(o).ok());
  EXPECT_TRUE(MakeLlama(Tiny(0, true)).ok());
}

TEST(LlamaTest, AfterSubmoduleSeesEachSubmoduleOnceInOrderInitialised) {
  for (bool tied : {false, true}) {
    LlamaOptions o = Grouped(tied);
    std::vector<const torch::nn::Module*> seen;
    std::vector<std::string> names_given;
    o.after_submodule = [&](const std::string& name, torch::nn::Module& m) {
      seen.push_back(&m);
      names_given.push_back(name);
      for (const auto& p : m.parameters()) {
        if (p.dim() == 2) {
          EXPECT_NEAR(p.std().item<double>(), 0.02, 0.003);
        }
      }
    };
    Llama m(o);
    std::map<const torch::nn::Module*, std::string> names;
    for (const auto& item : m.named_modules("", /*include_self=*/false))
      names[item.value().get()] = item.key();
    std::vector<std::string> got,
        want = {"model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm"};
    if (!tied) want.push_back("lm_head");
    for (const auto* s : seen) got.push_back(names.count(s) ? names[s] : "(not in the model)");
    EXPECT_EQ(got, want);
    EXPECT_EQ(names_given, want) << "the hook's names are the submodules' paths";
    // The hooked model computes the reference forward.
    Randomise(m);
    auto p = Params(m);
    torch::NoGradGuard g;
    const at::Tensor tokens = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
    EXPECT_TRUE(torch::allclose(m.forward(tokens), ReferenceLogits(p, o, tokens), 1e-5, 1e-5));
  }
}

}  // namespace
}  // namespace zerotrain::models
