#include "services/model/precision.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "services/model/coupling_block.h"
#include "services/model/transformer_blocks.h"

namespace petra::model {
namespace {

bool CpuAutocast() { return AutocastOn(torch::kCPU); }

TEST(ScopedAutocast, RunsConvolutionsInBf16AndPutsTheStateBack) {
  torch::Tensor x = torch::randn({2, 3, 8, 8});
  torch::Tensor w = torch::randn({4, 3, 3, 3});
  EXPECT_FALSE(CpuAutocast());
  {
    ScopedAutocast off(torch::kCPU, false);
    EXPECT_FALSE(CpuAutocast());
    EXPECT_EQ(torch::conv2d(x, w).scalar_type(), torch::kFloat);
  }
  {
    ScopedAutocast on(torch::kCPU, true);
    EXPECT_TRUE(CpuAutocast());
    EXPECT_EQ(torch::conv2d(x, w).scalar_type(), torch::kBFloat16);
    {
      ScopedAutocast nested(torch::kCPU, true);
      EXPECT_TRUE(CpuAutocast());
    }
    EXPECT_TRUE(CpuAutocast()) << "a nested scope ended the outer one";
  }
  EXPECT_FALSE(CpuAutocast());
  EXPECT_EQ(torch::conv2d(x, w).scalar_type(), torch::kFloat);
}

TEST(ScopedAutocast, AWeightChangedBetweenScopesIsCastAfresh) {
  // A cached bf16 copy of a weight would survive its optimizer step.
  torch::Tensor x = torch::randn({4, 8});
  torch::Tensor w = torch::randn({8, 8}).requires_grad_(true);
  torch::Tensor before, after;
  {
    ScopedAutocast on(torch::kCPU, true);
    before = torch::matmul(x, w).detach();
  }
  {
    torch::NoGradGuard no_grad;
    w.add_(1.0);
  }
  {
    ScopedAutocast on(torch::kCPU, true);
    after = torch::matmul(x, w).detach();
  }
  EXPECT_FALSE(torch::allclose(before, after));
}

TEST(ScopedAutocast, AWeightCastWithoutAGraphStillGetsItsGradientLater) {
  // A forward without a graph, then a recompute with one, in one scope (a
  // stage's skipped or sampled micro-batch does both): the weight's
  // gradient must reach it.
  torch::Tensor x = torch::randn({4, 8});
  torch::Tensor w = torch::randn({8, 8}).requires_grad_(true);
  ScopedAutocast on(torch::kCPU, true);
  {
    torch::NoGradGuard no_grad;
    (void)torch::matmul(x, w);
  }
  torch::matmul(x, w).to(torch::kFloat).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_GT(w.grad().abs().sum().item<double>(), 0.0);
}

TEST(AsStream, CastsToTheStreamsDtypeOnlyWhenItDiffers) {
  torch::Tensor stream = torch::randn({3});
  torch::Tensor half = torch::randn({3}).to(torch::kBFloat16);
  EXPECT_EQ(AsStream(half, stream).scalar_type(), torch::kFloat);
  torch::Tensor same = torch::randn({3});
  EXPECT_TRUE(AsStream(same, stream).is_same(same));
  EXPECT_EQ(ToFullPrecision(half).scalar_type(), torch::kFloat);
  EXPECT_TRUE(ToFullPrecision(same).is_same(same));
  torch::Tensor labels = torch::ones({3}, torch::kLong);
  EXPECT_TRUE(ToFullPrecision(labels).is_same(labels));
}

double RelativeError(const TensorPair& x, const TensorPair& y) {
  torch::Tensor d = torch::cat({(x.a - y.a).flatten(), (x.b - y.b).flatten()});
  torch::Tensor n = torch::cat({x.a.flatten(), x.b.flatten()});
  return d.norm().item<double>() / n.norm().item<double>();
}

// The point of fp32 streams: F under bf16 autocast, its output added to an
// fp32 stream and subtracted again from it, gives x back to fp32 rounding.
// Were the streams themselves bf16, each addition would round to bf16 and
// the rebuild would be off by bf16's rounding, 2^-9 relative.
TEST(Precision, ARebuildWithFp32StreamsIsExactToFp32RoundingUnderBf16) {
  torch::manual_seed(3);
  CouplingBlock block(ResidualOptions{false, 8, 8, 8, 1, true});
  TensorPair x{torch::randn({4, 8, 6, 6}), torch::randn({4, 8, 6, 6})};
  torch::NoGradGuard no_grad;
  const double fp32 = RelativeError(x, block.Inverse(block.Forward(x)));
  double bf16, bf16_streams;
  {
    ScopedAutocast on(torch::kCPU, true);
    TensorPair y = block.Forward(x);
    EXPECT_EQ(y.a.scalar_type(), torch::kFloat);
    EXPECT_EQ(y.b.scalar_type(), torch::kFloat);
    bf16 = RelativeError(x, block.Inverse(y));
    // The same with the stream rounded to bf16 where F joins it.
    TensorPair rounded{y.a.to(torch::kBFloat16).to(torch::kFloat), y.b};
    bf16_streams = RelativeError(x, block.Inverse(rounded));
  }
  EXPECT_LT(fp32, 1e-6);
  EXPECT_LT(bf16, 1e-6) << "fp32 streams under bf16 autocast";
  EXPECT_GT(bf16_streams, 1e-4) << "bf16 streams round on every addition";
}

TEST(Precision, RevViTUnderBf16KeepsItsStreamsFp32AndRebuildsExactly) {
  torch::manual_seed(4);
  TransformerOptions o;
  o.embed_dim = 16;
  o.heads = 2;
  o.mlp_hidden = 32;
  RevViTBlock block(o);
  TensorPair x{torch::randn({2, 9, 16}), torch::randn({2, 9, 16})};
  torch::NoGradGuard no_grad;
  ScopedAutocast on(torch::kCPU, true);
  TensorPair y = block.Forward(x);
  EXPECT_EQ(y.a.scalar_type(), torch::kFloat);
  EXPECT_EQ(y.b.scalar_type(), torch::kFloat);
  EXPECT_LT(RelativeError(x, block.Inverse(y)), 1e-6);
  // The rebuild's first half gives the same input.
  std::unique_ptr<PendingVjp> p = block.Rebuild(y);
  EXPECT_LT(RelativeError(x, p->input()), 1e-6);
}

}  // namespace
}  // namespace petra::model
