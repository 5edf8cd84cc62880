#include "services/engine/muon.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "services/engine/gradient_accumulator.h"

namespace petra::engine {
namespace {

// Jordan et al.'s quintic, x -> a x + b x^3 + c x^5, five times.
double Quintic5(double x) {
  for (int i = 0; i < 5; ++i) {
    x = 3.4445 * x - 4.7750 * x * x * x + 2.0315 * std::pow(x, 5);
  }
  return x;
}

// A rank-one g = sigma u v^T has one singular value, 1 once g is scaled to
// unit Frobenius norm: the iteration maps it to Quintic5(1) and keeps u v^T,
// exactly; wide, tall and a convolution's four dimensions alike.
TEST(Muon, OrthogonalizeIsTheQuinticIterationOnTheSingularValues) {
  torch::manual_seed(2);
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{3, 7}, {7, 3}, {4, 2, 3, 3}}) {
    const torch::Tensor u = torch::randn({shape[0], 1});
    int64_t rest = 1;
    for (size_t i = 1; i < shape.size(); ++i) rest *= shape[i];
    const torch::Tensor v = torch::randn({1, rest});
    const torch::Tensor g = (u.matmul(v) * 5.0).reshape(shape);
    const torch::Tensor uv = (u / u.norm()).matmul(v / v.norm()).reshape(shape);
    const torch::Tensor o = Orthogonalize(g);
    ASSERT_EQ(o.sizes(), g.sizes());
    EXPECT_TRUE(torch::allclose(o, uv * Quintic5(1.0), 1e-4, 1e-5))
        << "shape " << c10::str(g.sizes());
  }
  // A full-rank matrix: its singular values all land near 1 (the quintic
  // trades exactness for speed: within [0.6, 1.25]), its singular vectors
  // kept.
  const torch::Tensor g = torch::randn({6, 10});
  const torch::Tensor s = torch::linalg_svdvals(Orthogonalize(g));
  EXPECT_GT(s.min().item<double>(), 0.6);
  EXPECT_LT(s.max().item<double>(), 1.25);
}

// One step: buffer m v + g, Nesterov direction g + m v', decoupled weight
// decay, and the update scaled by 0.2 sqrt(max(rows, cols)).
TEST(Muon, StepIsNesterovMomentumOrthogonalisedAndScaled) {
  torch::manual_seed(4);
  const torch::Tensor w0 = torch::randn({3, 5});
  const torch::Tensor g = torch::randn({3, 5});
  const torch::Tensor v0 = torch::randn({3, 5});
  for (bool nesterov : {true, false}) {
    torch::Tensor w = w0.clone();
    torch::Tensor v = v0.clone();
    MuonStep(w, g, v, 0.01, 0.9, nesterov, 0.1);
    const torch::Tensor v1 = v0 * 0.9 + g;
    EXPECT_TRUE(torch::allclose(v, v1));
    const torch::Tensor u = nesterov ? g + v1 * 0.9 : v1;
    const torch::Tensor want =
        w0 * (1 - 0.01 * 0.1) - Orthogonalize(u) * (0.01 * 0.2 * std::sqrt(5.0));
    EXPECT_TRUE(torch::allclose(w, want, 1e-6, 1e-7)) << "nesterov " << nesterov;
  }
}

petra::v1::JobSpec MuonSpec() {
  petra::v1::JobSpec s;
  s.mutable_training()->set_accumulation_steps(1);
  s.mutable_training()->set_epochs(1);
  petra::v1::OptimizerSpec* o = s.mutable_optimizer();
  o->set_kind(petra::v1::OptimizerSpec::KIND_MUON);
  o->set_learning_rate(0.01);
  o->set_momentum(0.95);
  o->set_nesterov(true);
  o->set_weight_decay(0.1);
  o->set_beta1(0.9);
  o->set_beta2(0.95);
  o->set_eps(1e-8);
  s.mutable_schedule()->set_warmup_epochs(0);
  s.mutable_schedule()->set_decay(petra::v1::ScheduleSpec::DECAY_CONSTANT);
  return s;
}

// Optimizer kind muon: Muon steps the weight matrices, AdamW (the same
// rate, no decay) the rest; the matrices' momentum is checkpointed under
// torch's name and restores the same next steps.
TEST(Muon, TheAccumulatorStepsMatricesByMuonAndTheRestByAdamW) {
  const petra::v1::JobSpec spec = MuonSpec();
  petra::v1::JobSpec adamw = spec;
  adamw.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_ADAMW);
  adamw.mutable_optimizer()->clear_momentum();
  adamw.mutable_optimizer()->clear_nesterov();
  torch::manual_seed(6);
  const torch::Tensor w0 = torch::randn({4, 3});
  const torch::Tensor b0 = torch::randn({4});
  std::vector<torch::Tensor> params = {w0.clone(), b0.clone()};
  torch::Tensor b_adamw = b0.clone();
  torch::Tensor w_muon = w0.clone();
  torch::Tensor v = torch::zeros({4, 3});
  GradientAccumulator acc(params, spec, LrSchedule(spec, 1000));
  // AdamW on the vector alone, which takes no weight decay either way.
  GradientAccumulator reference({b_adamw}, adamw, LrSchedule(adamw, 1000),
                                0.0, {false});
  for (int t = 0; t < 3; ++t) {
    const torch::Tensor gw = torch::randn({4, 3});
    const torch::Tensor gb = torch::randn({4});
    acc.Add(params, {gw, gb});
    acc.FinishBackward({});
    reference.Add({b_adamw}, {gb});
    reference.FinishBackward({});
    MuonStep(w_muon, gw, v, 0.01, 0.95, true, 0.1);
    EXPECT_TRUE(torch::allclose(params[0], w_muon, 1e-6, 1e-7)) << t;
    EXPECT_TRUE(torch::allclose(params[1], b_adamw, 1e-6, 1e-7)) << t;
  }
  GradientAccumulator::NamedTensorList state;
  acc.AppendState("w", params[0], state);
  acc.AppendState("b", params[1], state);
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [name, t] : state) saved[name] = t.clone();
  ASSERT_EQ(saved.count("optimizer.w.momentum_buffer"), 1u);
  EXPECT_TRUE(torch::equal(saved.at("optimizer.w.momentum_buffer"), v));
  ASSERT_EQ(saved.count("optimizer.b.exp_avg"), 1u);
  EXPECT_EQ(saved.count("optimizer.w.exp_avg"), 0u);
  std::vector<torch::Tensor> copy = {params[0].clone(), params[1].clone()};
  GradientAccumulator resumed(copy, spec, LrSchedule(spec, 1000));
  ASSERT_TRUE(resumed.LoadState(saved, "w", copy[0]).ok());
  ASSERT_TRUE(resumed.LoadState(saved, "b", copy[1]).ok());
  resumed.ResetCounters(3);
  const torch::Tensor gw = torch::randn({4, 3});
  const torch::Tensor gb = torch::randn({4});
  acc.Add(params, {gw, gb});
  acc.FinishBackward({});
  resumed.Add(copy, {gw, gb});
  resumed.FinishBackward({});
  EXPECT_TRUE(torch::equal(params[0], copy[0]));
  EXPECT_TRUE(torch::equal(params[1], copy[1]));
}

}  // namespace
}  // namespace petra::engine
