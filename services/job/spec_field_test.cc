#include "services/job/spec_field.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::job {
namespace {

using ::testing::HasSubstr;

SpecField Field(const std::string& path) {
  absl::StatusOr<SpecField> f = SpecField::Find(path);
  EXPECT_TRUE(f.ok()) << f.status();
  return *f;
}

TEST(SpecField, FindsNestedFieldsAndRefusesWhatIsNotAValue) {
  EXPECT_TRUE(SpecField::Find("training.forward_gradient.guess").ok());
  absl::Status s = SpecField::Find("training.epoch").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("has no field epoch"));
  EXPECT_EQ(SpecField::Find("training").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecField::Find("seed.value").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SpecField, ParsesEachTypeByTheDescriptorAndShowsItBack) {
  struct Case {
    const char* path;
    const char* text;
  };
  for (const Case& c : {Case{"training.epochs", "12"},              // uint32
                        Case{"seed", "18446744073709551615"},       // uint64
                        Case{"priority", "-100"},                   // int32
                        Case{"model.width", "0.25"},                // double
                        Case{"training.recompute", "true"},         // bool
                        Case{"training.mode", "forward_gradient"},  // enum
                        Case{"name", "a job"},                      // string
                        Case{"schedule.step_epochs", "3,5,8"},      // repeated
                        Case{"devices", "cpu,cuda:1"}}) {
    petra::v1::JobSpec spec;
    SpecField f = Field(c.path);
    ASSERT_TRUE(f.Set(c.text, &spec).ok()) << c.path;
    EXPECT_EQ(f.Show(spec), c.text) << c.path;
  }
}

TEST(SpecField, EnumsTakeTheirShortNamesAsFlagsDo) {
  petra::v1::JobSpec spec;
  ASSERT_TRUE(Field("training.mode").Set("Forward-Gradient", &spec).ok());
  EXPECT_EQ(spec.training().mode(), petra::v1::TRAINING_MODE_FORWARD_GRADIENT);
  absl::Status s = Field("training.mode").Set("fast", &spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("petra"));  // the choices
  EXPECT_EQ(Field("training.mode").ValueName("X"),
            "backprop|petra|delayed|forward_gradient|pipeline");
}

TEST(SpecField, RefusesWhatTheTypeCannotHold) {
  petra::v1::JobSpec spec;
  EXPECT_THAT(Field("training.epochs").Set("-1", &spec).message(),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(Field("training.epochs").Set("4294967296", &spec).message(),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(Field("priority").Set("2147483648", &spec).message(),
              HasSubstr("out of range"));
  EXPECT_FALSE(Field("model.width").Set("nan", &spec).ok());
  EXPECT_FALSE(Field("training.recompute").Set("maybe", &spec).ok());
  EXPECT_FALSE(Field("schedule.step_epochs").Set("3,,5", &spec).ok());
  EXPECT_EQ(spec.training().epochs(), 0u) << "nothing set by a refusal";
}

TEST(SpecField, AListReplacesTheValuesAndEmptyClearsThem) {
  petra::v1::JobSpec spec;
  spec.add_devices("cpu");
  spec.add_devices("cpu");
  ASSERT_TRUE(Field("devices").Set("cuda:0", &spec).ok());
  EXPECT_EQ(spec.devices_size(), 1);
  ASSERT_TRUE(Field("devices").Set("", &spec).ok());
  EXPECT_EQ(spec.devices_size(), 0);
}

TEST(SpecField, AFieldInsideAOneofSelectsIt) {
  petra::v1::JobSpec spec;
  spec.mutable_partition()->set_stage_count(4);
  ASSERT_TRUE(Field("partition.splits.split_at").Set("0,3", &spec).ok());
  EXPECT_EQ(spec.partition().layout_case(), petra::v1::PartitionSpec::kSplits);
  EXPECT_EQ(spec.partition().splits().split_at_size(), 2);
}

TEST(SpecField, AValueNameIsAnEnumsChoicesOrTheOneGiven) {
  EXPECT_EQ(Field("training.epochs").ValueName("N"), "N");
  EXPECT_EQ(Field("training.recompute").ValueName(""), "");
}

}  // namespace
}  // namespace petra::job
