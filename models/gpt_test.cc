// Gpt against independent references: the parameter count against the module's own tensors, the
// attention (scaled_dot_product_attention) against an explicit masked softmax, the forward and the
// tied weight's gradient against a hand-written LibTorch forward with separate input and output
// embeddings, causality, bf16 against fp32, and activation checkpointing against the plain
// forward.
#include "models/gpt.h"

#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "recompute/activation_checkpoint.h"

namespace zerotrain::models {
namespace {

GptOptions Tiny() {
  GptOptions o;
  o.vocab_size = 50;
  o.block_size = 16;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_embd = 32;
  return o;
}

std::map<std::string, at::Tensor> Params(Gpt& m) {
  std::map<std::string, at::Tensor> p;
  for (auto& item : m.named_parameters()) p[item.key()] = item.value();
  return p;
}

TEST(GptTest, ParameterCountMatchesTheModule) {
  for (GptOptions o : {Tiny(), GptOptions{}}) {
    Gpt m(o);
    int64_t numel = 0;
    std::set<const void*> storages;
    for (const auto& p : m.parameters()) {
      numel += p.numel();
      EXPECT_TRUE(storages.insert(p.data_ptr()).second) << "a tensor is listed twice";
    }
    EXPECT_EQ(GptParameterCount(o), numel);
  }
  const int64_t n = GptParameterCount(GptOptions{});
  EXPECT_GE(n, 5'000'000);
  EXPECT_LE(n, 10'000'000);
}

TEST(GptTest, ValidateNamesFieldAndValue) {
  GptOptions o = Tiny();
  o.n_head = 5;
  EXPECT_NE(ValidateGptOptions(o).message().find("n_head (5)"), std::string::npos)
      << ValidateGptOptions(o);
  o = Tiny();
  o.dropout = 1.0;
  EXPECT_NE(ValidateGptOptions(o).message().find("dropout must be in [0, 1), got 1"),
            std::string::npos);
  o = Tiny();
  o.n_layer = 0;
  EXPECT_NE(ValidateGptOptions(o).message().find("n_layer must be positive, got 0"),
            std::string::npos);
  o = Tiny();
  o.checkpoint_every = -1;
  EXPECT_FALSE(ValidateGptOptions(o).ok());
  EXPECT_FALSE(MakeGpt(o).ok());
  EXPECT_TRUE(ValidateGptOptions(Tiny()).ok());
}

// The forward written out with plain tensor ops and an explicit mask, taking the input and
// output embeddings as separate tensors.
at::Tensor ReferenceLogits(std::map<std::string, at::Tensor>& p, const GptOptions& o,
                           const at::Tensor& tokens, const at::Tensor& w_in,
                           const at::Tensor& w_out) {
  const int64_t b = tokens.size(0), t = tokens.size(1), c = o.n_embd, h = o.n_head;
  auto ln = [&](const at::Tensor& x, const std::string& n) {
    return torch::layer_norm(x, {c}, p[n + ".weight"], p[n + ".bias"], 1e-5);
  };
  auto lin = [&](const at::Tensor& x, const std::string& n) {
    return torch::matmul(x, p[n + ".weight"].t()) + p[n + ".bias"];
  };
  at::Tensor x = w_in.index({tokens}) + p["wpe.weight"].slice(0, 0, t);
  at::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);
  for (int64_t l = 0; l < o.n_layer; ++l) {
    const std::string pre = "h." + std::to_string(l) + ".";
    at::Tensor qkv = lin(ln(x, pre + "ln_1"), pre + "attn.c_attn");
    auto heads = [&](int i) {
      return qkv.slice(2, i * c, (i + 1) * c).reshape({b, t, h, c / h}).permute({0, 2, 1, 3});
    };
    at::Tensor att = torch::matmul(heads(0), heads(1).transpose(-1, -2)) / std::sqrt(c / h);
    att = torch::softmax(att.masked_fill(future, -INFINITY), -1);
    at::Tensor y = torch::matmul(att, heads(2)).permute({0, 2, 1, 3}).reshape({b, t, c});
    x = x + lin(y, pre + "attn.c_proj");
    at::Tensor m = lin(ln(x, pre + "ln_2"), pre + "mlp.c_fc");
    m = 0.5 * m * (1 + torch::erf(m / std::sqrt(2.0)));
    x = x + lin(m, pre + "mlp.c_proj");
  }
  return torch::matmul(ln(x, "ln_f"), w_out.t());
}

TEST(GptTest, TiedWeightGetsBothGradientsAndForwardMatchesReference) {
  torch::manual_seed(1);
  const GptOptions o = Tiny();
  Gpt m(o);
  auto p = Params(m);
  EXPECT_EQ(p.count("wte.weight"), 1u);
  EXPECT_EQ(p.size(), 4 + 12 * static_cast<size_t>(o.n_layer) + 0) << "wte, wpe, ln_f x2";
  at::Tensor tokens = torch::randint(0, o.vocab_size, {3, o.block_size}, torch::kLong);
  at::Tensor targets = torch::randint(0, o.vocab_size, {3, o.block_size}, torch::kLong);
  GptLoss(m.forward(tokens), targets).backward();

  at::Tensor w_in = p["wte.weight"].detach().clone().requires_grad_();
  at::Tensor w_out = p["wte.weight"].detach().clone().requires_grad_();
  std::map<std::string, at::Tensor> ref;
  for (auto& [name, t] : p) ref[name] = t.detach().clone();
  at::Tensor logits = ReferenceLogits(ref, o, tokens, w_in, w_out);
  torch::nn::functional::cross_entropy(logits.reshape({-1, o.vocab_size}), targets.reshape({-1}))
      .backward();
  {
    torch::NoGradGuard g;
    EXPECT_TRUE(torch::allclose(m.forward(tokens), logits, 1e-4, 1e-5));
  }
  EXPECT_GT(w_in.grad().abs().max().item<double>(), 0);
  EXPECT_GT(w_out.grad().abs().max().item<double>(), 0);
  EXPECT_TRUE(torch::allclose(p["wte.weight"].grad(), w_in.grad() + w_out.grad(), 1e-4, 1e-6));
  EXPECT_FALSE(torch::allclose(p["wte.weight"].grad(), w_out.grad(), 1e-4, 1e-6));
}

// softmax(q k^T / sqrt(D), masked above the diagonal) v, written out: no fused kernel.
at::Tensor ReferenceAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(2);
  at::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);
  at::Tensor att =
      torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
  return torch::matmul(torch::softmax(att.masked_fill(future, -INFINITY), -1), v);
}

TEST(GptTest, AttentionMatchesExplicitMaskedSoftmaxForwardAndBackward) {
  torch::manual_seed(5);
  // [B, H, T, D]: the tiny model's heads, the default model's (6 heads of 64), one token, and a
  // length that is no multiple of a kernel's tile.
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 4, 16, 8}, {1, 6, 128, 64}, {3, 1, 1, 16}, {2, 2, 33, 12}};
  for (const auto& shape : shapes) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    std::vector<at::Tensor> in, ref;
    for (int i = 0; i < 3; ++i) {
      in.push_back(torch::randn(shape).requires_grad_());
      ref.push_back(in.back().detach().clone().requires_grad_());
    }
    at::Tensor y = CausalSelfAttention(in[0], in[1], in[2], 0.0);
    at::Tensor want = ReferenceAttention(ref[0], ref[1], ref[2]);
    ASSERT_EQ(y.sizes(), want.sizes());
    EXPECT_TRUE(torch::allclose(y, want, 1e-5, 1e-5)) << (y - want).abs().max();
    at::Tensor upstream = torch::randn(shape);
    (y * upstream).sum().backward();
    (want * upstream).sum().backward();
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::allclose(in[i].grad(), ref[i].grad(), 1e-5, 1e-5))
          << "q k v"[2 * i] << ": " << (in[i].grad() - ref[i].grad()).abs().max();
    }
  }
}

TEST(GptTest, AttentionDropoutOnlyWhenAsked) {
  torch::manual_seed(6);
  const at::Tensor q = torch::randn({2, 2, 16, 8}), k = torch::randn({2, 2, 16, 8}),
                   v = torch::randn({2, 2, 16, 8});
  const at::Tensor plain = CausalSelfAttention(q, k, v, 0.0);
  EXPECT_TRUE(torch::equal(plain, CausalSelfAttention(q, k, v, 0.0)));
  torch::manual_seed(7);
  const at::Tensor dropped = CausalSelfAttention(q, k, v, 0.5);
  EXPECT_FALSE(torch::allclose(dropped, plain, 1e-3, 1e-3));
  EXPECT_TRUE(torch::isfinite(dropped).all().item<bool>());
  torch::manual_seed(7);  // the same draws from the global generator: the same weights dropped
  EXPECT_TRUE(torch::equal(dropped, CausalSelfAttention(q, k, v, 0.5)));
  // The first position attends to itself alone (weight 1): each head's output there is v's first
  // row scaled by 1 / (1 - p), or 0 where that one weight was dropped.
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      const at::Tensor got = dropped[b][h][0], row = v[b][h][0];
      EXPECT_TRUE(torch::allclose(got, row * 2, 1e-5, 1e-6) ||
                  torch::equal(got, torch::zeros_like(got)))
          << got << row;
    }
  }
}

TEST(GptTest, EarlierLogitsIgnoreLaterTokens) {
  torch::manual_seed(2);
  const GptOptions o = Tiny();
  Gpt m(o);
  torch::NoGradGuard g;
  at::Tensor a = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
  at::Tensor b = a.clone();
  b.index_put_({torch::indexing::Slice(), 10}, (a.select(1, 10) + 1) % o.vocab_size);
  at::Tensor la = m.forward(a), lb = m.forward(b);
  EXPECT_TRUE(torch::allclose(la.slice(1, 0, 10), lb.slice(1, 0, 10), 0, 1e-6));
  EXPECT_FALSE(torch::allclose(la.slice(1, 10), lb.slice(1, 10), 0, 1e-6));
  EXPECT_THROW(m.forward(torch::zeros({1, o.block_size + 1}, torch::kLong)), c10::Error);
}

TEST(GptTest, Bf16ForwardAndBackwardTrackFp32) {
  const GptOptions o = Tiny();
  torch::manual_seed(3);
  Gpt fp32(o);
  torch::manual_seed(3);
  Gpt bf16(o);
  bf16.to(torch::kBFloat16);
  at::Tensor tokens = torch::randint(0, o.vocab_size, {4, o.block_size}, torch::kLong);
  at::Tensor targets = torch::randint(0, o.vocab_size, {4, o.block_size}, torch::kLong);
  at::Tensor l32 = fp32.forward(tokens), l16 = bf16.forward(tokens);
  EXPECT_EQ(l16.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::allclose(l16.to(torch::kFloat), l32, 2e-2, 2e-2))
      << (l16.to(torch::kFloat) - l32).abs().max();
  at::Tensor loss16 = GptLoss(l16, targets);
  EXPECT_EQ(loss16.scalar_type(), torch::kFloat);
  EXPECT_NEAR(loss16.item<double>(), GptLoss(l32, targets).item<double>(), 1e-2);
  loss16.backward();
  for (const auto& p : bf16.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
  // The same weights with every block checkpointed: the same bf16 gradients.
  GptOptions ck = o;
  ck.checkpoint_every = 1;
  torch::manual_seed(3);
  Gpt bf16_ck(ck);
  bf16_ck.to(torch::kBFloat16);
  GptLoss(bf16_ck.forward(tokens), targets).backward();
  auto a = bf16.parameters(), b = bf16_ck.parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].grad(), b[i].grad())) << i;
}

// Loss and gradients of one step with the given options, after seeding the global RNG.
std::pair<at::Tensor, std::vector<at::Tensor>> LossAndGrads(const GptOptions& o) {
  torch::manual_seed(4);
  Gpt m(o);
  at::Tensor tokens = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
  at::Tensor targets = torch::randint(0, o.vocab_size, {2, o.block_size}, torch::kLong);
  at::Tensor loss = GptLoss(m.forward(tokens), targets);
  loss.backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : m.parameters()) grads.push_back(p.grad().clone());
  return {loss.detach(), grads};
}

TEST(GptTest, CheckpointingGivesBitwiseTheSameLossAndGradients) {
  for (double dropout : {0.0, 0.2}) {
    GptOptions o = Tiny();
    o.n_layer = 3;
    o.dropout = dropout;
    auto [loss, grads] = LossAndGrads(o);
    for (int64_t every : {1, 2}) {
      o.checkpoint_every = every;
      o.profile_checkpointing = true;
      recompute::ResetRecomputeStats();
      auto [ck_loss, ck_grads] = LossAndGrads(o);
      // Blocks 0..2 with every k: 3 recomputed for k = 1, blocks 0 and 2 for k = 2.
      EXPECT_EQ(recompute::GetRecomputeStats().recomputations, every == 1 ? 3 : 2);
      EXPECT_TRUE(torch::equal(loss, ck_loss)) << "dropout " << dropout << " every " << every;
      ASSERT_EQ(grads.size(), ck_grads.size());
      for (size_t i = 0; i < grads.size(); ++i) {
        EXPECT_TRUE(torch::equal(grads[i], ck_grads[i]))
            << "parameter " << i << " dropout " << dropout << " every " << every;
      }
    }
  }
}

}  // namespace
}  // namespace zerotrain::models
