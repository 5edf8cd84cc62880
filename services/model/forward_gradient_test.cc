#include "services/model/forward_gradient.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <typeinfo>

#include "services/job/job_spec_defaults.h"
#include "services/model/batch_norm.h"
#include "services/model/network.h"

namespace petra::model {
namespace {

petra::v1::ModelSpec Spec(petra::v1::Architecture arch) {
  petra::v1::JobSpec job;
  job.mutable_model()->set_architecture(arch);
  // i-RevNet squeezes 2x2 pixels three times: 32x32, not 28x28.
  job.mutable_model()->set_variant(arch == petra::v1::ARCHITECTURE_IREVNET18
                                       ? petra::v1::VARIANT_CIFAR
                                       : petra::v1::VARIANT_MNIST);
  const bool transformer = arch == petra::v1::ARCHITECTURE_REVVIT ||
                           arch == petra::v1::ARCHITECTURE_VIT;
  if (transformer) {
    auto* t = job.mutable_model()->mutable_transformer();
    t->set_embed_dim(16);
    t->set_depth(2);
    t->set_heads(2);
    t->set_patch_size(7);
  } else {
    job.mutable_model()->set_width(0.25);
  }
  job.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  job::ApplyJobSpecDefaults(&job);
  return job.model();
}

std::vector<torch::Tensor> Parts(const TensorPair& p) {
  std::vector<torch::Tensor> out = {p.a};
  if (p.b.defined()) out.push_back(p.b);
  return out;
}

class ForwardGradient
    : public ::testing::TestWithParam<petra::v1::Architecture> {};

// For every block of the network, on the activations it really receives:
// the pushed tangent J_x t_x + J_θ v, read through a random cotangent w,
// equals <dL/dx, t_x> + <dL/dθ, v> for L = <w, y>, the exact gradient by
// reverse mode; and a second tangent (parameters only) from the same call
// equals <dL/dθ, v'>. Within 1e-4 of |a| |b| for a dot product <a, b>:
// fp32 sums bound their error by the sum of |a_i b_i| (at most |a| |b|),
// not by the result, which cancellation can make far smaller.
TEST_P(ForwardGradient, DirectionalDerivativeIsTheGradientDotTheDirection) {
  absl::StatusOr<Network> net = BuildNetwork(Spec(GetParam()), 7);
  ASSERT_TRUE(net.ok()) << net.status();
  ScopedBnMode batch_stats(BnMode::kBatchStats);
  std::vector<int64_t> shape = {3};
  shape.insert(shape.end(), net->input_shape.begin(), net->input_shape.end());
  TensorPair x{torch::randn(shape), {}};
  std::set<std::string> kinds;
  for (auto& block : net->blocks) {
    SCOPED_TRACE(block->kind() + " " + typeid(*block).name());
    std::vector<torch::Tensor> params = block->parameters();
    Tangent both{{torch::randn_like(x.a),
                  x.b.defined() ? torch::randn_like(x.b) : torch::Tensor()},
                 RandomGuess(params, 1)};
    Tangent params_only{{}, RandomGuess(params, 2)};
    // The second stream alone (none for a single-tensor input).
    Tangent b_only{{torch::Tensor(),
                    x.b.defined() ? torch::randn_like(x.b) : torch::Tensor()},
                   {}};
    TangentOutput pushed = PushTangents(*block, x, {both, params_only, b_only});
    ASSERT_EQ(pushed.tangents.size(), 3u);

    // The reference: reverse mode through the same Forward.
    TensorPair in{
        x.a.detach().requires_grad_(true),
        x.b.defined() ? x.b.detach().requires_grad_(true) : torch::Tensor()};
    TensorPair y = block->Forward(in);
    std::vector<torch::Tensor> w = {torch::randn_like(y.a)};
    if (y.b.defined()) w.push_back(torch::randn_like(y.b));
    std::vector<torch::Tensor> wrt = Parts(in);
    wrt.insert(wrt.end(), params.begin(), params.end());
    std::vector<torch::Tensor> grads =
        torch::autograd::grad(Parts(y), wrt, w, false, false, true);
    const size_t n_in = Parts(in).size();
    std::vector<torch::Tensor> grad_x(grads.begin(), grads.begin() + n_in);
    std::vector<torch::Tensor> grad_p(grads.begin() + n_in, grads.end());

    const double want_both =
        Dot(grad_x, Parts(both.input)) + Dot(grad_p, both.parameters);
    const double want_params = Dot(grad_p, params_only.parameters);
    const double got_both = Dot(w, Parts(pushed.tangents[0]));
    const double got_params = Dot(w, Parts(pushed.tangents[1]));
    auto scale = [](const std::vector<torch::Tensor>& a,
                    const std::vector<torch::Tensor>& b) {
      return 1e-4 * std::sqrt(Dot(a, a) * Dot(b, b));
    };
    std::vector<torch::Tensor> both_dir = Parts(both.input);
    both_dir.insert(both_dir.end(), both.parameters.begin(),
                    both.parameters.end());
    EXPECT_NEAR(got_both, want_both, scale(grads, both_dir));
    EXPECT_NEAR(got_params, want_params,
                scale(grad_p, params_only.parameters));
    const double want_b =
        x.b.defined() ? Dot({grad_x[1]}, {b_only.input.b}) : 0.0;
    const double got_b = Dot(w, Parts(pushed.tangents[2]));
    EXPECT_NEAR(got_b, want_b,
                x.b.defined() ? scale({grad_x[1]}, {b_only.input.b}) : 0.0);
    EXPECT_TRUE(torch::equal(pushed.output.a, y.a.detach()));
    kinds.insert(block->kind());
    x = pushed.output;
  }
  EXPECT_GE(kinds.size(), 3u);  // a stem, the body's blocks, a head
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ForwardGradient,
    ::testing::Values(petra::v1::ARCHITECTURE_REVNET18,
                      petra::v1::ARCHITECTURE_RESNET18,
                      petra::v1::ARCHITECTURE_IREVNET18,
                      petra::v1::ARCHITECTURE_REVVIT,
                      petra::v1::ARCHITECTURE_VIT),
    [](const auto& info) {
      return petra::v1::Architecture_Name(info.param).substr(13);
    });

// With v the exact gradient, normalised, the estimate d·v is the gradient.
TEST(ForwardGradientEstimate, AlongTheGradientItIsTheGradient) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> g = {torch::randn({4, 3}), torch::randn({5})};
  std::vector<torch::Tensor> v = Normalised(g);
  EXPECT_NEAR(Dot(v, v), 1.0, 1e-6);
  std::vector<torch::Tensor> estimate = Estimate(Dot(g, v), v);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_TRUE(torch::allclose(estimate[i], g[i], 1e-5, 1e-6)) << i;
  }
  // A zero direction stays zero rather than becoming NaN.
  std::vector<torch::Tensor> zero = Normalised({torch::zeros({3})});
  EXPECT_TRUE(torch::equal(zero[0], torch::zeros({3})));
}

// The random guess is unbiased: E[<g, v> v] = g for v ~ N(0, I). Read
// along ĝ = g/|g|, one draw gives |g| (ĝ·v)², mean |g| and variance
// 2|g|²; along a unit u orthogonal to g it gives |g| (ĝ·v)(u·v), mean 0
// and variance |g|². The mean of n draws is then within 4.5 standard errors
// of |g| and of 0; each check fails by chance with probability about
// 7e-6 under the normal approximation (n = 20000), 1.4e-5 for both.
TEST(ForwardGradientEstimate, TheRandomGuessIsUnbiased) {
  torch::manual_seed(2);
  std::vector<torch::Tensor> g = {torch::randn({6}), torch::randn({2, 2})};
  const double norm = std::sqrt(Dot(g, g));
  std::vector<torch::Tensor> ghat = Normalised(g);
  // u: a unit vector orthogonal to g (Gram-Schmidt on a fixed draw).
  std::vector<torch::Tensor> u = {torch::randn({6}), torch::randn({2, 2})};
  const double along = Dot(u, ghat);
  for (size_t i = 0; i < u.size(); ++i) u[i] = u[i] - along * ghat[i];
  u = Normalised(u);
  const int n = 20000;
  double sum_along = 0, sum_across = 0;
  for (int k = 0; k < n; ++k) {
    std::vector<torch::Tensor> v = RandomGuess(g, 100 + k);
    std::vector<torch::Tensor> e = Estimate(Dot(g, v), v);
    sum_along += Dot(e, ghat);
    sum_across += Dot(e, u);
  }
  const double se_along = std::sqrt(2.0 / n) * norm;
  const double se_across = std::sqrt(1.0 / n) * norm;
  EXPECT_NEAR(sum_along / n, norm, 4.5 * se_along);
  EXPECT_NEAR(sum_across / n, 0.0, 4.5 * se_across);
}

}  // namespace
}  // namespace petra::model
