#include "services/schedule/training_mode.h"

#include <gtest/gtest.h>

namespace petra::schedule {
namespace {

petra::v1::TrainingSpec Mode(petra::v1::TrainingMode mode) {
  petra::v1::TrainingSpec t;
  t.set_mode(mode);
  return t;
}

TEST(PlanMode, SaysWhatEachModeMeansForTheStages) {
  const ModePlan backprop = PlanMode(Mode(petra::v1::TRAINING_MODE_BACKPROP));
  EXPECT_EQ(backprop.schedule, ScheduleKind::kBackprop);
  EXPECT_FALSE(backprop.delayed_gradients);
  EXPECT_EQ(backprop.in_flight(0, 4), 1);

  const ModePlan petra = PlanMode(Mode(petra::v1::TRAINING_MODE_PETRA));
  EXPECT_EQ(petra.schedule, ScheduleKind::kPetra);
  EXPECT_TRUE(petra.delayed_gradients);
  EXPECT_FALSE(petra.stash_inputs || petra.stash_weights ||
               petra.keeps_directions || petra.traffic.tangents ||
               petra.traffic.labels_with_activations ||
               petra.traffic.derivatives_down);
  EXPECT_EQ(petra.in_flight(0, 4), 7);
  EXPECT_EQ(petra.in_flight(3, 4), 1);

  petra::v1::TrainingSpec t = Mode(petra::v1::TRAINING_MODE_DELAYED);
  t.set_stash_weights(true);
  t.set_rebuild_with(petra::v1::TrainingSpec::REBUILD_WITH_CURRENT);
  const ModePlan delayed = PlanMode(t);
  EXPECT_EQ(delayed.schedule, ScheduleKind::kDelayed);
  EXPECT_FALSE(delayed.stash_inputs);
  EXPECT_TRUE(delayed.stash_weights);
  EXPECT_TRUE(delayed.rebuild_with_current);

  // Stash flags mean nothing outside delayed mode.
  t.set_mode(petra::v1::TRAINING_MODE_PETRA);
  EXPECT_FALSE(PlanMode(t).stash_weights);
  EXPECT_FALSE(PlanMode(t).rebuild_with_current);

  const ModePlan fg = PlanMode(Mode(petra::v1::TRAINING_MODE_FORWARD_GRADIENT));
  EXPECT_EQ(fg.schedule, ScheduleKind::kForwardGradient);
  EXPECT_TRUE(fg.traffic.labels_with_activations);
  EXPECT_TRUE(fg.traffic.tangents);
  EXPECT_TRUE(fg.traffic.derivatives_down);
  EXPECT_TRUE(fg.keeps_directions);

  // A synchronous pipeline: exact gradients, flushed every k micro-batches,
  // its activations stored unless recomputed.
  t = Mode(petra::v1::TRAINING_MODE_PIPELINE);
  t.set_accumulation_steps(6);
  const ModePlan one_f_one_b = PlanMode(t);
  EXPECT_EQ(one_f_one_b.schedule, ScheduleKind::kOneFOneB);
  EXPECT_EQ(one_f_one_b.group, 6);
  EXPECT_FALSE(one_f_one_b.delayed_gradients);
  EXPECT_TRUE(one_f_one_b.store_activations);
  EXPECT_EQ(one_f_one_b.in_flight(0, 4), 4);
  EXPECT_EQ(one_f_one_b.in_flight(2, 4), 2);
  EXPECT_EQ(one_f_one_b.in_flight(3, 4), 1);
  t.set_pipeline_schedule(petra::v1::TrainingSpec::PIPELINE_SCHEDULE_GPIPE);
  t.set_recompute(true);
  const ModePlan gpipe = PlanMode(t);
  EXPECT_EQ(gpipe.schedule, ScheduleKind::kGpipe);
  EXPECT_FALSE(gpipe.store_activations);
  EXPECT_EQ(gpipe.in_flight(0, 4), 6);
  EXPECT_EQ(gpipe.in_flight(3, 4), 1);
  // A flush smaller than 1F1B's warm-up holds the flush.
  t.set_pipeline_schedule(petra::v1::TrainingSpec::PIPELINE_SCHEDULE_1F1B);
  t.set_accumulation_steps(2);
  EXPECT_EQ(PlanMode(t).in_flight(0, 4), 2);
}

}  // namespace
}  // namespace petra::schedule
