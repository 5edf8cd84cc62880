#include "services/model/auxiliary_head.h"

#include <gtest/gtest.h>

#include <cmath>

namespace petra::model {
namespace {

TEST(PooledFeatures, AveragesEachStreamOverSpaceOrTokens) {
  const torch::Tensor image =
      torch::arange(2 * 3 * 4 * 4).reshape({2, 3, 4, 4}).to(torch::kFloat);
  const torch::Tensor tokens = torch::ones({2, 5, 6});
  EXPECT_TRUE(torch::allclose(PooledFeatures({image, {}}), image.mean({2, 3})));
  const torch::Tensor both = PooledFeatures({image, tokens});
  EXPECT_EQ(both.sizes(), (torch::IntArrayRef{2, 3 + 6}));
  EXPECT_TRUE(torch::equal(both.slice(1, 3), torch::ones({2, 6})));
  EXPECT_EQ(PooledFeatures({torch::ones({2, 7}), {}}).size(1), 7);
}

// torch.nn.Linear's bound, a draw fixed by the seed alone, and logits of the
// pooled output.
TEST(AuxiliaryHead, IsALinearLayerOnThePooledOutputSeededByItsOwnGenerator) {
  AuxiliaryHead unbuilt;
  EXPECT_FALSE(unbuilt.built());
  EXPECT_EQ(unbuilt.parameter_bytes(), 0);

  torch::manual_seed(1);
  AuxiliaryHead a(16, 10, 42, torch::kCPU);
  torch::manual_seed(2);
  AuxiliaryHead b(16, 10, 42, torch::kCPU);
  AuxiliaryHead c(16, 10, 43, torch::kCPU);
  ASSERT_TRUE(a.built());
  EXPECT_EQ(a.features(), 16);
  EXPECT_EQ(a.weight().sizes(), (torch::IntArrayRef{10, 16}));
  EXPECT_TRUE(a.weight().requires_grad());
  EXPECT_TRUE(torch::equal(a.weight(), b.weight()));
  EXPECT_TRUE(torch::equal(a.bias(), b.bias()));
  EXPECT_FALSE(torch::equal(a.weight(), c.weight()));
  EXPECT_LE(a.weight().abs().max().item<double>(), 0.25);  // 1/sqrt(16)
  EXPECT_GT(a.weight().abs().max().item<double>(), 0.2);
  EXPECT_EQ(a.parameter_bytes(), (10 * 16 + 10) * 4);

  const torch::Tensor y = torch::randn({4, 16, 3, 3});
  const torch::Tensor expected =
      torch::matmul(y.mean({2, 3}), a.weight().t()) + a.bias();
  EXPECT_TRUE(torch::allclose(a.Logits({y, {}}), expected, 1e-5, 1e-6));
}

}  // namespace
}  // namespace petra::model
