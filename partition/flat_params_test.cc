// FlatParams moves parameters into flat buffers without changing their values, autograd identity
// or holders: every parameter is a view of its dtype group's buffer, writes through the buffer
// show in the module, backward still produces gradients for the same leaves, and no bucket mixes
// dtypes.
#include "partition/flat_params.h"

#include <torch/nn/modules/linear.h>

#include "gtest/gtest.h"

namespace zerotrain::partition {
namespace {

TEST(FlatParamsTest, ParametersAliasTheFlatBuffer) {
  torch::manual_seed(0);
  torch::nn::Linear a(5, 7), b(7, 3);
  NamedTensors named;
  std::vector<torch::Tensor> before;
  for (auto& item : a->named_parameters()) named.emplace_back("a." + item.key(), item.value());
  for (auto& item : b->named_parameters()) named.emplace_back("b." + item.key(), item.value());
  for (auto& [n, p] : named) before.push_back(p.detach().clone());
  const void* weight_impl = a->weight.unsafeGetTensorImpl();

  auto flat = FlatParams::Create(named, /*world_size=*/4, /*bucket_numel=*/16);
  ASSERT_TRUE(flat.ok()) << flat.status();
  const int64_t total = 35 + 7 + 21 + 3;
  EXPECT_EQ(flat->layout().numel(), total);
  ASSERT_EQ(flat->groups().size(), 1u);
  const torch::Tensor buffer = flat->flat().parts()[0];
  EXPECT_EQ(buffer.numel(), 68);  // padded to a multiple of 4

  // Same TensorImpl: the module and any optimizer holding it see the new storage.
  EXPECT_EQ(a->weight.unsafeGetTensorImpl(), weight_impl);
  const auto* base = static_cast<const char*>(buffer.data_ptr());
  for (int i = 0; i < flat->num_params(); ++i) {
    const torch::Tensor& p = flat->params()[i].second;
    EXPECT_TRUE(torch::equal(p, before[i])) << flat->name(i);
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
    EXPECT_EQ(static_cast<const char*>(p.data_ptr()),
              base + flat->layout().param_offset(i) * p.element_size());
    EXPECT_TRUE(torch::equal(flat->ViewOf(flat->flat(), i), p));
  }
  // Padding is zero.
  EXPECT_EQ(buffer.narrow(0, total, 68 - total).abs().sum().item<float>(), 0.0f);

  // Writes through the flat buffer reach the module.
  {
    torch::NoGradGuard no_grad;
    buffer.fill_(0.5);
  }
  EXPECT_TRUE(torch::all(a->bias == 0.5).item<bool>());

  // Autograd still reaches the same leaves.
  torch::Tensor y = b(a(torch::ones({2, 5}))).sum();
  y.backward();
  ASSERT_TRUE(a->weight.grad().defined());
  EXPECT_EQ(a->weight.grad().sizes(), a->weight.sizes());
  EXPECT_TRUE(b->bias.grad().defined());
}

TEST(FlatParamsTest, OneBufferPerDtypeGroup) {
  torch::manual_seed(0);
  NamedTensors named = {{"a", torch::randn({5}).requires_grad_()},
                        {"b", torch::randn({7}).to(torch::kBFloat16).requires_grad_()},
                        {"c", torch::randn({3}).requires_grad_()}};
  std::vector<torch::Tensor> before;
  for (auto& [n, p] : named) before.push_back(p.detach().clone());

  auto flat = FlatParams::Create(named, /*world_size=*/4, /*bucket_numel=*/4);
  ASSERT_TRUE(flat.ok()) << flat.status();
  // Grouped stably by dtype, in the order each dtype first appears: a, c, then b.
  ASSERT_EQ(flat->num_params(), 3);
  EXPECT_EQ(flat->name(0), "a");
  EXPECT_EQ(flat->name(1), "c");
  EXPECT_EQ(flat->name(2), "b");
  ASSERT_EQ(flat->groups().size(), 2u);
  const FlatGroup& f32 = flat->groups()[0];
  const FlatGroup& bf16 = flat->groups()[1];
  EXPECT_EQ(f32.dtype, torch::kFloat);
  EXPECT_EQ(bf16.dtype, torch::kBFloat16);
  EXPECT_EQ(f32.begin, 0);
  EXPECT_EQ(f32.numel, 8);  // 5 + 3, already a multiple of 4
  EXPECT_EQ(bf16.begin, 8);
  EXPECT_EQ(bf16.numel, 8);  // 7 padded to 8
  EXPECT_EQ(flat->flat().parts()[0].scalar_type(), torch::kFloat);
  EXPECT_EQ(flat->flat().parts()[1].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(flat->flat().nbytes(), 8 * 4 + 8 * 2);

  // No bucket holds two dtypes, and every parameter is a view of its own group's buffer.
  const auto& buckets = flat->layout().buckets();
  for (int k = 0; k < static_cast<int>(buckets.size()); ++k) {
    const FlatGroup& g = flat->groups()[flat->GroupOfBucket(k)];
    EXPECT_GE(buckets[k].begin, g.begin);
    EXPECT_LE(buckets[k].begin + buckets[k].numel, g.begin + g.numel);
    for (int p = buckets[k].first_param; p < buckets[k].end_param; ++p) {
      EXPECT_EQ(flat->dtype(p), g.dtype) << "bucket " << k;
    }
  }
  const std::vector<int> original = {0, 2, 1};  // laid-out index -> index in `named`
  for (int i = 0; i < 3; ++i) {
    const torch::Tensor& p = flat->params()[i].second;
    const torch::Tensor& part = flat->flat().parts()[flat->GroupOfParam(i)];
    EXPECT_TRUE(p.is_alias_of(part)) << flat->name(i);
    EXPECT_EQ(p.scalar_type(), before[original[i]].scalar_type());
    EXPECT_TRUE(torch::equal(p, before[original[i]])) << flat->name(i);
    EXPECT_TRUE(torch::equal(flat->ViewOf(flat->flat(), i), p));
  }
  // A shard of each group: 8 / 4 elements each, at the group's begin / 4.
  GroupedBuffer shard = flat->NewShard();
  ASSERT_EQ(shard.parts().size(), 2u);
  EXPECT_EQ(shard.begin(1), 2);
  EXPECT_EQ(shard.Range(2, 2).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(shard.Range(0, 2).scalar_type(), torch::kFloat);
  EXPECT_THROW(flat->flat().Range(6, 4), c10::Error);  // crosses from fp32 into bf16
}

TEST(FlatParamsTest, Errors) {
  EXPECT_EQ(FlatParams::Create({}, 2, 8).status().code(), absl::StatusCode::kInvalidArgument);
  NamedTensors devices = {{"f", torch::ones({3}, torch::requires_grad())},
                          {"m", torch::ones({3}, torch::device(torch::kMeta).requires_grad(true))}};
  auto status = FlatParams::Create(devices, 2, 8).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("'m'"), std::string::npos) << status;
  // A sharded layout (stage 3) takes one dtype.
  NamedTensors mixed = {{"f", torch::ones({3}, torch::requires_grad())},
                        {"d", torch::ones({3}, torch::dtype(torch::kDouble).requires_grad(true))}};
  status = FlatParams::Describe(mixed, 2, 8, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("'d'"), std::string::npos) << status;
}

}  // namespace
}  // namespace zerotrain::partition
