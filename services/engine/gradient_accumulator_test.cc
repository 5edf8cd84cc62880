#include "services/engine/gradient_accumulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "services/engine/skip_transaction.h"

namespace petra::engine {
namespace {

// A constant rate, one micro-batch a step.
petra::v1::JobSpec Spec(double momentum, bool nesterov, double weight_decay) {
  petra::v1::JobSpec s;
  s.mutable_training()->set_accumulation_steps(1);
  s.mutable_training()->set_epochs(1);
  s.mutable_optimizer()->set_learning_rate(0.1);
  s.mutable_optimizer()->set_momentum(momentum);
  s.mutable_optimizer()->set_nesterov(nesterov);
  s.mutable_optimizer()->set_weight_decay(weight_decay);
  // Acts only where a test gives the accumulator a delay.
  s.mutable_training()->set_spike_compensation(true);
  s.mutable_schedule()->set_warmup_epochs(0);
  s.mutable_schedule()->set_decay(petra::v1::ScheduleSpec::DECAY_CONSTANT);
  return s;
}

// The parameter's value after each of `steps` steps of a gradient of 1 at
// the first step and 0 after (the step's impulse response).
std::vector<double> Impulse(const petra::v1::JobSpec& spec, double delay,
                            int steps) {
  torch::Tensor p = torch::zeros({1});
  GradientAccumulator acc({p}, spec, LrSchedule(spec, 1000), delay);
  std::vector<double> out;
  for (int t = 0; t < steps; ++t) {
    acc.Add({p}, {torch::full({1}, t == 0 ? 1.0 : 0.0)});
    acc.FinishBackward({});
    out.push_back(p.item<double>());
  }
  return out;
}

// Spike compensation's defining property: a gradient applied D steps late
// puts the weights, from then on, where plain momentum SGD would have had
// them D steps after the same gradient applied at once; in all it still
// moves them by lr / (1 - m).
TEST(GradientAccumulator, SpikeCompensationCatchesUpTheMissedSteps) {
  for (bool nesterov : {true, false}) {
    const petra::v1::JobSpec spec = Spec(0.9, nesterov, 0);
    const std::vector<double> plain = Impulse(spec, 0, 400);
    for (int d : {1, 3, 8}) {
      const std::vector<double> compensated = Impulse(spec, d, 400 - d);
      for (size_t t = 0; t < compensated.size(); ++t) {
        ASSERT_NEAR(compensated[t], plain[t + d], 1e-5)
            << "nesterov " << nesterov << ", D " << d << ", step " << t;
      }
      EXPECT_NEAR(compensated.back(), -0.1 / (1 - 0.9), 1e-5);
      // Not plain SGD: its first step is larger.
      EXPECT_LT(compensated[0], plain[0] - 1e-3);
    }
  }
}

// With a vanishing delay the compensated step is torch's SGD step: the same
// momentum buffer (a copy of the first gradient, then m v + g) and the same
// weight decay, on a parameter that has some.
TEST(GradientAccumulator, CompensatedStepIsTorchsStepWithoutDelay) {
  const petra::v1::JobSpec spec = Spec(0.9, true, 5e-4);
  torch::manual_seed(3);
  const torch::Tensor start = torch::randn({4, 3});
  torch::Tensor ours = start.clone();
  torch::Tensor torchs = start.clone();
  GradientAccumulator compensated({ours}, spec, LrSchedule(spec, 1000), 1e-12);
  GradientAccumulator plain({torchs}, spec, LrSchedule(spec, 1000));
  EXPECT_NEAR(compensated.gradient_coefficient(), 1.0, 1e-9);
  EXPECT_NEAR(compensated.momentum_coefficient(), 0.9, 1e-9);
  for (int t = 0; t < 5; ++t) {
    const torch::Tensor g = torch::randn({4, 3});
    compensated.Add({ours}, {g});
    plain.Add({torchs}, {g});
    compensated.FinishBackward({});
    plain.FinishBackward({});
  }
  EXPECT_TRUE(torch::allclose(ours, torchs, 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(compensated.Momentum(ours),
                              plain.Momentum(torchs), 1e-6, 1e-7));
  EXPECT_FALSE(torch::allclose(ours, start, 1e-3, 1e-3));
}

petra::v1::JobSpec AdamWSpec(double clip = 0) {
  petra::v1::JobSpec s = Spec(0, false, 0.05);
  s.mutable_optimizer()->clear_momentum();
  s.mutable_optimizer()->clear_nesterov();
  s.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_ADAMW);
  s.mutable_optimizer()->set_learning_rate(0.01);
  s.mutable_optimizer()->set_beta1(0.9);
  s.mutable_optimizer()->set_beta2(0.999);
  s.mutable_optimizer()->set_eps(1e-8);
  s.mutable_optimizer()->set_clip_grad_norm(clip);
  return s;
}

// Steps `acc` on gradient number t = from .. to - 1 of a fixed sequence.
void Feed(GradientAccumulator& acc, const std::vector<torch::Tensor>& params,
          int from, int to) {
  for (int t = from; t < to; ++t) {
    std::vector<torch::Tensor> grads;
    for (size_t i = 0; i < params.size(); ++i) {
      grads.push_back(torch::sin(torch::arange(params[i].numel())
                                     .reshape(params[i].sizes())
                                     .to(torch::kFloat) *
                                 (t + 1.0 + static_cast<double>(i))));
    }
    acc.Add(params, grads);
    acc.FinishBackward({});
  }
}

// What a checkpoint keeps of AdamW (torch's names) brings a new optimizer to
// the same next steps: resume gives the same weights.
TEST(GradientAccumulator, AdamWStateRoundTripsThroughACheckpoint) {
  const petra::v1::JobSpec spec = AdamWSpec();
  std::vector<torch::Tensor> a = {torch::zeros({3, 2}), torch::zeros({3})};
  GradientAccumulator first(a, spec, LrSchedule(spec, 1000));
  Feed(first, a, 0, 4);
  GradientAccumulator::NamedTensorList state;
  first.AppendState("w", a[0], state);
  first.AppendState("b", a[1], state);
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [name, t] : state) saved[name] = t.clone();
  ASSERT_EQ(saved.size(), 6u);
  EXPECT_EQ(saved.at("optimizer.w.step").item<int64_t>(), 4);
  ASSERT_TRUE(saved.count("optimizer.b.exp_avg_sq"));

  std::vector<torch::Tensor> b = {a[0].clone(), a[1].clone()};
  GradientAccumulator second(b, spec, LrSchedule(spec, 1000));
  ASSERT_TRUE(second.LoadState(saved, "w", b[0]).ok());
  ASSERT_TRUE(second.LoadState(saved, "b", b[1]).ok());
  second.ResetCounters(4);
  Feed(first, a, 4, 7);
  Feed(second, b, 4, 7);
  EXPECT_TRUE(torch::equal(a[0], b[0]));
  EXPECT_TRUE(torch::equal(a[1], b[1]));
  // Without the state the steps differ (the test can fail).
  std::vector<torch::Tensor> c = {b[0].clone(), b[1].clone()};
  GradientAccumulator fresh(c, spec, LrSchedule(spec, 1000));
  Feed(fresh, c, 7, 8);
  Feed(first, a, 7, 8);
  EXPECT_FALSE(torch::allclose(a[0], c[0]));
}

petra::v1::JobSpec NAdamWSpec() {
  petra::v1::JobSpec s = AdamWSpec();
  s.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_NADAMW);
  s.mutable_optimizer()->set_beta1(0.99);
  s.mutable_optimizer()->set_weight_decay(0.1);
  // Larger than torch's 0.004, so that mu_t moves within a few steps.
  s.mutable_optimizer()->set_momentum_decay(0.5);
  return s;
}

// torch.optim.NAdam(decoupled_weight_decay=True), as its documentation
// writes the algorithm, for one scalar weight, in double precision:
// theta -= lr wd theta; mu_t = beta1 (1 - 0.5 x 0.96^(t psi)); m, v Adam's
// moments; theta -= lr (mu_{t+1} m / (1 - prod_{i<=t+1} mu_i) +
// (1 - mu_t) g / (1 - prod_{i<=t} mu_i)) / (sqrt(v / (1 - beta2^t)) + eps).
struct NAdamReference {
  double lr, beta1, beta2, eps, wd, psi;
  double theta, m = 0, v = 0, product = 1;
  int t = 0;
  double Mu(int i) const { return beta1 * (1 - 0.5 * std::pow(0.96, i * psi)); }
  void Step(double g) {
    ++t;
    theta -= lr * wd * theta;
    const double mu = Mu(t), mu_next = Mu(t + 1);
    product *= mu;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    const double denom = std::sqrt(v / (1 - std::pow(beta2, t))) + eps;
    theta -= lr * (mu_next * m / (1 - product * mu_next) +
                   (1 - mu) * g / (1 - product)) /
             denom;
  }
};

// KIND_NADAMW steps exactly as torch's NAdam with decoupled weight decay
// (the optimizer of Ajanthan et al.'s official code), weight decay on the
// matrix only, and keeps torch's mu_product in its checkpoint.
TEST(GradientAccumulator, NAdamWStepsAsTorchsNAdamWithDecoupledWeightDecay) {
  const petra::v1::JobSpec spec = NAdamWSpec();
  const petra::v1::OptimizerSpec& o = spec.optimizer();
  torch::manual_seed(5);
  const torch::Tensor w0 = torch::randn({3, 2});
  const torch::Tensor b0 = torch::randn({3});
  std::vector<torch::Tensor> params = {w0.clone(), b0.clone()};
  GradientAccumulator acc(params, spec, LrSchedule(spec, 1000));
  std::vector<NAdamReference> want;
  for (int i = 0; i < 9; ++i) {
    const bool matrix = i < 6;
    want.push_back({o.learning_rate(), o.beta1(), o.beta2(), o.eps(),
                    matrix ? o.weight_decay() : 0.0, o.momentum_decay(),
                    matrix ? w0.view(-1)[i].item<double>()
                           : b0[i - 6].item<double>()});
  }
  for (int t = 0; t < 6; ++t) {
    const torch::Tensor gw = torch::randn({3, 2});
    const torch::Tensor gb = torch::randn({3});
    acc.Add(params, {gw, gb});
    acc.FinishBackward({});
    for (int i = 0; i < 9; ++i) {
      want[i].Step(i < 6 ? gw.view(-1)[i].item<double>()
                         : gb[i - 6].item<double>());
      const double got = i < 6 ? params[0].view(-1)[i].item<double>()
                               : params[1][i - 6].item<double>();
      ASSERT_NEAR(got, want[i].theta, 1e-5 * (1 + std::abs(want[i].theta)))
          << "step " << t + 1 << ", element " << i;
    }
  }
  // Not AdamW's steps (the test can fail): the same gradients from the same
  // start end elsewhere.
  petra::v1::JobSpec adamw = spec;
  adamw.mutable_optimizer()->set_kind(petra::v1::OptimizerSpec::KIND_ADAMW);
  adamw.mutable_optimizer()->clear_momentum_decay();
  GradientAccumulator::NamedTensorList state;
  acc.AppendState("w", params[0], state);
  std::map<std::string, torch::Tensor> saved(state.begin(), state.end());
  ASSERT_EQ(saved.count("optimizer.w.mu_product"), 1u);
  EXPECT_NEAR(saved.at("optimizer.w.mu_product").item<double>(),
              want[0].product, 1e-12);
  EXPECT_EQ(saved.at("optimizer.w.step").item<int64_t>(), 6);
  // An AdamW job refuses NAdamW's state, and the other way round.
  torch::Tensor q = torch::zeros({3, 2});
  GradientAccumulator other(std::vector<torch::Tensor>{q}, adamw,
                            LrSchedule(adamw, 1000));
  absl::Status refused = other.LoadState(saved, "w", q);
  EXPECT_NE(refused.message().find("mu_product"), std::string::npos)
      << refused;
  saved.erase("optimizer.w.mu_product");
  GradientAccumulator nadamw(std::vector<torch::Tensor>{q}, spec,
                             LrSchedule(spec, 1000));
  refused = nadamw.LoadState(saved, "w", q);
  EXPECT_NE(refused.message().find("mu_product\" is missing"),
            std::string::npos)
      << refused;
}

// A stage with a delay D and training.delay_compensation lambda_0 steps on
// DC-ASGD-a's corrected gradient, g + lambda_0 g g (D delta) /
// sqrt(MeanSquare), MeanSquare = 0.95 MeanSquare + 0.05 g^2, where delta =
// gamma delta + (1 - gamma) (w_new - w_old) after each step; checked against
// those recurrences written out in double precision, on plain SGD so that
// nothing else moves the weights. The checkpoint carries delta and
// MeanSquare: a restored accumulator takes the same next steps.
TEST(GradientAccumulator, DelayCompensationCorrectsByTheDriftOverTheDelay) {
  petra::v1::JobSpec spec = Spec(0, false, 0);
  spec.mutable_training()->set_spike_compensation(false);
  spec.mutable_training()->set_delay_compensation(0.5);
  spec.mutable_training()->set_weight_drift_decay(0.6);
  const double lr = 0.1, lambda = 0.5, gamma = 0.6, delay = 2;
  torch::manual_seed(7);
  const torch::Tensor start = torch::randn({4});
  torch::Tensor p = start.clone();
  GradientAccumulator acc({p}, spec, LrSchedule(spec, 1000), delay);
  std::vector<double> w(4), ms(4, 0.0), delta(4, 0.0);
  for (int i = 0; i < 4; ++i) w[i] = start[i].item<double>();
  bool corrected = false;
  std::map<std::string, torch::Tensor> saved;
  torch::Tensor restored;
  std::unique_ptr<GradientAccumulator> resumed;
  for (int t = 0; t < 6; ++t) {
    const torch::Tensor g = torch::randn({4});
    if (t == 3) {
      GradientAccumulator::NamedTensorList state;
      acc.AppendState("p", p, state);
      for (const auto& [name, tensor] : state) saved[name] = tensor.clone();
      restored = p.clone();
      resumed = std::make_unique<GradientAccumulator>(
          std::vector<torch::Tensor>{restored}, spec, LrSchedule(spec, 1000),
          delay);
      ASSERT_TRUE(resumed->LoadState(saved, "p", restored).ok());
      resumed->ResetCounters(3);
    }
    acc.Add({p}, {g});
    acc.FinishBackward({});
    if (resumed != nullptr) {
      resumed->Add({restored}, {g});
      resumed->FinishBackward({});
    }
    for (int i = 0; i < 4; ++i) {
      double gi = g[i].item<double>();
      ms[i] = 0.95 * ms[i] + 0.05 * gi * gi;
      // No drift before the first step has been taken.
      if (t > 0) {
        const double c = lambda * gi * gi * delay * delta[i] /
                         (std::sqrt(ms[i]) + 1e-12);
        corrected = corrected || std::abs(c) > 1e-4;
        gi += c;
      }
      const double old = w[i];
      w[i] -= lr * gi;
      delta[i] = gamma * delta[i] + (1 - gamma) * (w[i] - old);
      ASSERT_NEAR(p[i].item<double>(), w[i], 1e-5) << "step " << t << ", " << i;
    }
  }
  EXPECT_TRUE(corrected);  // the correction was large enough to show
  ASSERT_EQ(saved.count("delay.p.drift"), 1u);
  ASSERT_EQ(saved.count("delay.p.mean_square"), 1u);
  EXPECT_TRUE(torch::equal(p, restored));
  // The drift the accumulator reports is D steps of delta.
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(acc.WeightDrift(p, delay)[i].item<double>(), delay * delta[i],
                1e-6);
  }
}

// The last stage (no delay) and a stage without a correction track nothing.
TEST(GradientAccumulator, WithoutDelayOrCorrectionNoDriftIsKept) {
  petra::v1::JobSpec spec = Spec(0.9, true, 0);
  spec.mutable_training()->set_discrepancy_correction(true);
  torch::Tensor p = torch::zeros({2});
  GradientAccumulator last({p}, spec, LrSchedule(spec, 1000), 0.0);
  spec.mutable_training()->set_discrepancy_correction(false);
  torch::Tensor q = torch::zeros({2});
  GradientAccumulator plain({q}, spec, LrSchedule(spec, 1000), 2.0);
  for (int t = 0; t < 2; ++t) {
    last.Add({p}, {torch::ones({2})});
    last.FinishBackward({});
    plain.Add({q}, {torch::ones({2})});
    plain.FinishBackward({});
  }
  EXPECT_FALSE(last.corrects_discrepancy());
  EXPECT_FALSE(last.WeightDrift(p, 1).defined());
  EXPECT_FALSE(plain.WeightDrift(q, 1).defined());
}

// Another optimizer's checkpoint, or a state with a field missing, is
// refused by name rather than half-loaded.
TEST(GradientAccumulator, AStateOfAnotherOptimizerIsRefused) {
  const petra::v1::JobSpec spec = AdamWSpec();
  torch::Tensor p = torch::zeros({2, 2});
  GradientAccumulator adamw({p}, spec, LrSchedule(spec, 1000));
  absl::Status s = adamw.LoadState(
      {{"optimizer.w.momentum_buffer", torch::ones({2, 2})}}, "w", p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("another optimizer's state; this job's "
                             "optimizer is adamw"),
            std::string::npos)
      << s;
  s = adamw.LoadState({{"optimizer.w.exp_avg", torch::ones({2, 2})},
                       {"optimizer.w.step", torch::tensor(int64_t{3})}},
                      "w", p);
  EXPECT_NE(s.message().find("\"optimizer.w.exp_avg_sq\" is missing"),
            std::string::npos)
      << s;
  s = adamw.LoadState({{"optimizer.w.exp_avg", torch::ones({3})},
                       {"optimizer.w.exp_avg_sq", torch::ones({3})},
                       {"optimizer.w.step", torch::tensor(int64_t{3})}},
                      "w", p);
  EXPECT_NE(s.message().find("has shape [3], the optimizer needs [2, 2]"),
            std::string::npos)
      << s;
  const petra::v1::JobSpec sgd_spec = Spec(0.9, true, 0);
  GradientAccumulator sgd({p}, sgd_spec, LrSchedule(sgd_spec, 1000));
  s = sgd.LoadState({{"optimizer.w.exp_avg", torch::ones({2, 2})}}, "w", p);
  EXPECT_NE(s.message().find("this job's optimizer is sgd"), std::string::npos)
      << s;
}

// Clipping scales a stage's gradient down to the norm, never up, and
// counts the steps it clipped.
TEST(GradientAccumulator, ClippingBoundsTheStageGradientNorm) {
  petra::v1::JobSpec spec = Spec(0, false, 0);
  spec.mutable_optimizer()->set_learning_rate(1.0);
  spec.mutable_optimizer()->set_clip_grad_norm(1.0);
  torch::Tensor p = torch::zeros({2});
  GradientAccumulator acc({p}, spec, LrSchedule(spec, 1000));
  acc.Add({p}, {torch::tensor({3.0f, 4.0f})});  // norm 5: scaled to 1
  acc.FinishBackward({});
  EXPECT_NEAR(acc.last_gradient_norm(), 5.0, 1e-5);
  EXPECT_TRUE(torch::allclose(p, torch::tensor({-0.6f, -0.8f})));
  acc.Add({p}, {torch::tensor({0.3f, 0.4f})});  // norm 0.5: as it is
  acc.FinishBackward({});
  EXPECT_TRUE(torch::allclose(p, torch::tensor({-0.9f, -1.2f})));
  EXPECT_EQ(acc.clipped_steps(), 1);
}

// The skip transaction around one micro-batch's update (skip policy): a
// finite gradient going down commits the held gradients, a NaN one drops
// them, zeroes itself and counts the skip, and leaving early drops them.
TEST(SkipTransaction, CommitsDropsOrDropsOnTheWayOut) {
  const petra::v1::JobSpec spec = Spec(0, false, 0);
  torch::Tensor p = torch::zeros({1});
  GradientAccumulator acc({p}, spec, LrSchedule(spec, 1000));
  NonFiniteCheck skip(
      1, petra::v1::TrainingSpec::NON_FINITE_POLICY_SKIP_MICRO_BATCH);
  int64_t skipped = 0;
  auto step = [&](float down, bool finish) {
    SkipTransaction update(skip, acc, &skipped);
    acc.Add({p}, {torch::ones({1})});
    model::TensorPair g{torch::full({1}, down), torch::full({1}, down)};
    if (!finish) return g;  // an error's early return
    absl::StatusOr<bool> bad = update.Finish(7, &g);
    EXPECT_TRUE(bad.ok()) << bad.status();
    return g;
  };
  step(2.0f, true);  // committed: the step moves p by -0.1
  acc.FinishBackward({});
  EXPECT_NEAR(p.item<float>(), -0.1f, 1e-6);
  model::TensorPair zeroed = step(NAN, true);
  acc.FinishBackward({});
  EXPECT_NEAR(p.item<float>(), -0.1f, 1e-6);  // dropped: no move
  EXPECT_EQ(zeroed.a.item<float>(), 0.0f);
  EXPECT_EQ(skipped, 1);
  step(2.0f, false);
  acc.FinishBackward({});
  EXPECT_NEAR(p.item<float>(), -0.1f, 1e-6);  // dropped on the way out
  EXPECT_EQ(skipped, 1);
}

}  // namespace
}  // namespace petra::engine
