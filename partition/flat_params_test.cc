// FlatParams moves parameters into one buffer without changing their values, autograd identity
// or holders: every parameter is a view of the flat buffer, writes through the buffer show in the
// module, and backward still produces gradients for the same leaves.
#include "partition/flat_params.h"

#include <torch/torch.h>

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
  EXPECT_EQ(flat->flat().numel(), 68);  // padded to a multiple of 4

  // Same TensorImpl: the module and any optimizer holding it see the new storage.
  EXPECT_EQ(a->weight.unsafeGetTensorImpl(), weight_impl);
  const auto* base = static_cast<const char*>(flat->flat().data_ptr());
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
  EXPECT_EQ(flat->flat().narrow(0, total, 68 - total).abs().sum().item<float>(), 0.0f);

  // Writes through the flat buffer reach the module.
  {
    torch::NoGradGuard no_grad;
    flat->flat().fill_(0.5);
  }
  EXPECT_TRUE(torch::all(a->bias == 0.5).item<bool>());

  // Autograd still reaches the same leaves.
  torch::Tensor y = b(a(torch::ones({2, 5}))).sum();
  y.backward();
  ASSERT_TRUE(a->weight.grad().defined());
  EXPECT_EQ(a->weight.grad().sizes(), a->weight.sizes());
  EXPECT_TRUE(b->bias.grad().defined());
}

TEST(FlatParamsTest, Errors) {
  EXPECT_EQ(FlatParams::Create({}, 2, 8).status().code(), absl::StatusCode::kInvalidArgument);
  NamedTensors mixed = {{"f", torch::ones({3}, torch::requires_grad())},
                        {"d", torch::ones({3}, torch::dtype(torch::kDouble).requires_grad(true))}};
  auto status = FlatParams::Create(mixed, 2, 8).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("'d'"), std::string::npos) << status;
}

}  // namespace
}  // namespace zerotrain::partition
