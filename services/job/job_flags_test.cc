#include "services/job/job_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/job/job_spec_validation.h"

namespace petra::job {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Status ParseInto(const std::vector<std::string>& args,
                       petra::v1::JobSpec* spec) {
  cli::FlagSet flags("test", "test");
  AddJobFlags(flags, spec);
  return flags.Parse(args);
}

TEST(JobFlags, MapToSpecFields) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(ParseInto({"--arch",
                         "revnet34",
                         "--dataset=cifar10",
                         "--width",
                         "0.5",
                         "--stages",
                         "4",
                         "--mode",
                         "delayed",
                         "--stash-inputs",
                         "--accumulation",
                         "2",
                         "--micro-batch",
                         "32",
                         "--epochs",
                         "12",
                         "--lr",
                         "0.05",
                         "--momentum",
                         "0",
                         "--decay",
                         "step",
                         "--step-epochs",
                         "5,9",
                         "--seed",
                         "3",
                         "--devices",
                         "cuda:0,cuda:1,cpu,cpu"},
                        &spec)
                  .ok());
  EXPECT_EQ(spec.model().architecture(), petra::v1::ARCHITECTURE_REVNET34);
  EXPECT_EQ(spec.dataset().kind(), petra::v1::DATASET_KIND_CIFAR10);
  EXPECT_EQ(spec.model().width(), 0.5);
  EXPECT_EQ(spec.partition().stage_count(), 4u);
  EXPECT_EQ(spec.training().mode(), petra::v1::TRAINING_MODE_DELAYED);
  EXPECT_TRUE(spec.training().stash_inputs());
  EXPECT_EQ(spec.training().accumulation_steps(), 2u);
  EXPECT_EQ(spec.training().micro_batch_size(), 32u);
  EXPECT_EQ(spec.training().epochs(), 12u);
  EXPECT_EQ(spec.optimizer().learning_rate(), 0.05);
  EXPECT_TRUE(spec.optimizer().has_momentum());
  EXPECT_THAT(spec.schedule().step_epochs(), ::testing::ElementsAre(5, 9));
  EXPECT_EQ(spec.seed(), 3u);
  EXPECT_EQ(spec.devices_size(), 4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobFlags, SplitAtCutsTheStagesByHand) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(ParseInto({"--split-at", "4,7"}, &spec).ok());
  ASSERT_TRUE(spec.partition().has_splits());
  EXPECT_THAT(spec.partition().splits().split_at(), ElementsAre(4u, 7u));
}

TEST(JobFlags, UnsetFlagsLeaveFieldsUnset) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(ParseInto({"--arch", "revnet18"}, &spec).ok());
  EXPECT_FALSE(spec.training().has_epochs());
  EXPECT_FALSE(spec.optimizer().has_learning_rate());
}

TEST(JobFlags, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {{"--arch", "revnet19"},
            "flag --arch: value: unknown value \"revnet19\""},
           {{"--epochs", "-1"}, "flag --epochs: bad value \"-1\""},
           {{"--lr", "fast"}, "flag --lr: bad value \"fast\""},
           {{"--stages", "many"}, "flag --stages: bad value \"many\""},
           {{"--split-at", "4,x"}, "flag --split-at: bad value \"x\""},
           {{"--step-epochs", "1,x"}, "flag --step-epochs"},
           {{"--micro-batch"}, "flag --micro-batch needs a value"}}) {
    petra::v1::JobSpec spec;
    absl::Status s = ParseInto(c.args, &spec);
    ASSERT_FALSE(s.ok()) << c.args[0];
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.expected));
  }
}

TEST(JobFlags, OverlayReplacesRepeatedFieldsAndLayout) {
  petra::v1::JobSpec base;
  base.add_devices("cpu");
  base.mutable_partition()->set_stage_count(3);
  base.set_seed(1);
  petra::v1::JobSpec overrides;
  overrides.add_devices("cuda:0");
  overrides.mutable_partition()->set_per_block(true);
  OverlayJobSpec(overrides, &base);
  EXPECT_THAT(base.devices(), ::testing::ElementsAre("cuda:0"));
  EXPECT_TRUE(base.partition().per_block());
  EXPECT_EQ(base.seed(), 1u);
}

}  // namespace
}  // namespace petra::job
