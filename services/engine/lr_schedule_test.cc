#include "services/engine/lr_schedule.h"

#include <gtest/gtest.h>

namespace petra::engine {
namespace {

petra::v1::JobSpec Spec(petra::v1::ScheduleSpec::Decay decay, double warmup) {
  petra::v1::JobSpec s;
  s.mutable_optimizer()->set_learning_rate(0.4);
  s.mutable_training()->set_epochs(10);
  s.mutable_schedule()->set_warmup_epochs(warmup);
  s.mutable_schedule()->set_decay(decay);
  s.mutable_schedule()->set_step_factor(0.1);
  return s;
}

TEST(LrSchedule, LinearWarmupFromZero) {
  LrSchedule s(Spec(petra::v1::ScheduleSpec::DECAY_CONSTANT, 2), 10);
  EXPECT_DOUBLE_EQ(s.At(0), 0.4 / 20);
  EXPECT_DOUBLE_EQ(s.At(9), 0.4 * 10 / 20);
  EXPECT_DOUBLE_EQ(s.At(19), 0.4);
  EXPECT_DOUBLE_EQ(s.At(50), 0.4);
}

TEST(LrSchedule, StepDecayAtEpochs) {
  petra::v1::JobSpec spec = Spec(petra::v1::ScheduleSpec::DECAY_STEP, 0);
  spec.mutable_schedule()->add_step_epochs(3);
  spec.mutable_schedule()->add_step_epochs(6);
  LrSchedule s(spec, 10);
  EXPECT_DOUBLE_EQ(s.At(29), 0.4);
  EXPECT_NEAR(s.At(30), 0.04, 1e-12);
  EXPECT_NEAR(s.At(60), 0.004, 1e-12);
}

TEST(LrSchedule, CosineFromPeakToZero) {
  LrSchedule s(Spec(petra::v1::ScheduleSpec::DECAY_COSINE, 1), 10);
  EXPECT_DOUBLE_EQ(s.At(10), 0.4);
  EXPECT_NEAR(s.At(55), 0.2, 1e-12);  // halfway through the 90 decay steps
  EXPECT_NEAR(s.At(100), 0.0, 1e-12);
  EXPECT_EQ(s.total_steps(), 100);
}

TEST(LrSchedule, MaxStepsShortensCosine) {
  petra::v1::JobSpec spec = Spec(petra::v1::ScheduleSpec::DECAY_COSINE, 0);
  spec.mutable_training()->set_max_steps(20);
  LrSchedule s(spec, 10);
  EXPECT_EQ(s.total_steps(), 20);
  EXPECT_NEAR(s.At(10), 0.2, 1e-12);
}

TEST(LrSchedule, ADelayedStageStepsAtTheRateOverOnePlusItsDelayToThePower) {
  petra::v1::JobSpec spec = Spec(petra::v1::ScheduleSpec::DECAY_CONSTANT, 1);
  spec.mutable_schedule()->set_delay_lr_power(0.5);
  const LrSchedule shared(spec, 10);
  const LrSchedule late = shared.ForDelay(8);  // (1 + 8)^-0.5 = 1/3
  for (int64_t step : {0, 5, 9, 10, 99}) {
    EXPECT_NEAR(late.At(step), shared.At(step) / 3, 1e-12) << step;
  }
  EXPECT_DOUBLE_EQ(shared.ForDelay(0).At(50), 0.4);  // the last stage
  spec.mutable_schedule()->set_delay_lr_power(0);
  EXPECT_DOUBLE_EQ(LrSchedule(spec, 10).ForDelay(8).At(50), 0.4);  // off
}

TEST(LrSchedule, TheDelayPowerFallsToZeroOverItsAnnealEpochs) {
  petra::v1::JobSpec spec = Spec(petra::v1::ScheduleSpec::DECAY_CONSTANT, 0);
  spec.mutable_schedule()->set_delay_lr_power(1);
  spec.mutable_schedule()->set_delay_lr_anneal_epochs(4);  // 40 steps
  const LrSchedule late = LrSchedule(spec, 10).ForDelay(3);
  EXPECT_NEAR(late.At(0), 0.4 / 4, 1e-12);   // (1 + 3)^-1
  EXPECT_NEAR(late.At(20), 0.4 / 2, 1e-12);  // (1 + 3)^-0.5
  EXPECT_NEAR(late.At(40), 0.4, 1e-12);      // the shared rate from here
  EXPECT_NEAR(late.At(70), 0.4, 1e-12);
}

}  // namespace
}  // namespace petra::engine
