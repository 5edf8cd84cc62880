#include "services/engine/gradient_accumulator.h"

#include <gtest/gtest.h>

#include <vector>

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

}  // namespace
}  // namespace petra::engine
