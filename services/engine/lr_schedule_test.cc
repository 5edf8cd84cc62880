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

}  // namespace
}  // namespace petra::engine
