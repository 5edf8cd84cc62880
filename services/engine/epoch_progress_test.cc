#include "services/engine/epoch_progress.h"

#include <gtest/gtest.h>

#include "services/engine/lr_schedule.h"
#include "services/job/job_spec_validation.h"

namespace petra::engine {
namespace {

petra::v1::JobSpec ProgressSpec() {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  s.mutable_training()->set_epochs(4);
  s.mutable_schedule()->set_warmup_epochs(1);
  absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(s);
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return *resolved;
}

TEST(ProgressBuilder, AnEpochCarriesItsFiguresTotalsAndRate) {
  const petra::v1::JobSpec spec = ProgressSpec();
  const ProgressBuilder builder(spec, 10);
  EpochReport e;
  e.epoch = 2;
  e.steps = 20;
  e.train_loss = 1.5;
  e.train_accuracy = 0.4;
  e.samples_per_second = 300;
  e.corrupt_images_skipped = 3;
  e.stages.resize(2);
  petra::v1::Progress p = builder.AfterEpoch(e, 8.0);
  EXPECT_EQ(p.epoch(), 2u);
  EXPECT_EQ(p.total_epochs(), 4u);
  EXPECT_EQ(p.step(), 20u);
  EXPECT_EQ(p.total_steps(), 40u);
  EXPECT_DOUBLE_EQ(p.train_loss(), 1.5);
  EXPECT_DOUBLE_EQ(p.samples_per_second(), 300);
  EXPECT_EQ(p.corrupt_images_skipped(), 3u);
  EXPECT_EQ(p.stages_size(), 2);
  EXPECT_DOUBLE_EQ(p.elapsed_seconds(), 8.0);
  EXPECT_DOUBLE_EQ(p.eta_seconds(), 8.0);  // half done in 8 s
  // The rate of the last step taken, as the stages applied it.
  EXPECT_DOUBLE_EQ(p.learning_rate(), LrSchedule(spec, 10).At(19));
  // No evaluation yet: no test figures (not zeros).
  EXPECT_FALSE(p.has_test_accuracy());
  e.tested = true;
  e.test_accuracy = 0.5;
  p = builder.AfterEpoch(e, 8.0);
  ASSERT_TRUE(p.has_test_accuracy());
  EXPECT_DOUBLE_EQ(p.test_accuracy(), 0.5);
}

TEST(ProgressBuilder, MaxStepsCapsTheTotal) {
  petra::v1::JobSpec spec = ProgressSpec();
  spec.mutable_training()->set_max_steps(25);
  const ProgressBuilder builder(spec, 10);
  petra::v1::Progress p;
  builder.Complete(1.0, &p);  // no step yet: no estimate, the first rate
  EXPECT_EQ(p.total_steps(), 25u);
  EXPECT_EQ(p.eta_seconds(), 0);
  EXPECT_DOUBLE_EQ(p.learning_rate(), LrSchedule(spec, 10).At(0));
}

}  // namespace
}  // namespace petra::engine
