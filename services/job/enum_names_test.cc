#include "services/job/enum_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "petra/v1/job.pb.h"

namespace petra::job {
namespace {

using google::protobuf::GetEnumDescriptor;

TEST(EnumNames, ShortNamesDropThePrefix) {
  EXPECT_EQ(EnumShortName(petra::v1::ARCHITECTURE_REVNET18), "revnet18");
  EXPECT_EQ(EnumShortName(petra::v1::DATASET_KIND_FASHION_MNIST),
            "fashion_mnist");
  EXPECT_EQ(EnumShortName(petra::v1::ScheduleSpec::DECAY_COSINE), "cosine");
  EXPECT_EQ(EnumShortName(petra::v1::ARCHITECTURE_UNSPECIFIED), "unspecified");
  EXPECT_EQ(EnumShortName(static_cast<petra::v1::Architecture>(99)), "99");
}

TEST(EnumNames, ListSkipsUnspecified) {
  EXPECT_THAT(EnumShortNames(GetEnumDescriptor<petra::v1::TrainingMode>()),
              ::testing::ElementsAre("backprop", "petra", "delayed",
                                     "forward_gradient", "pipeline"));
}

TEST(EnumNames, ParseIsCaseAndDashInsensitive) {
  const auto* kind = GetEnumDescriptor<petra::v1::DatasetKind>();
  EXPECT_EQ(*ParseEnumShortName(kind, "fashion-mnist", "f"),
            petra::v1::DATASET_KIND_FASHION_MNIST);
  EXPECT_EQ(*ParseEnumShortName(kind, "CIFAR10", "f"),
            petra::v1::DATASET_KIND_CIFAR10);
}

TEST(EnumNames, ParseRefusesUnknownAndUnspecified) {
  const auto* arch = GetEnumDescriptor<petra::v1::Architecture>();
  for (const char* bad : {"revnet19", "unspecified", ""}) {
    absl::StatusOr<int> r = ParseEnumShortName(arch, bad, "--arch");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()),
                ::testing::HasSubstr("--arch: unknown value"));
    EXPECT_THAT(std::string(r.status().message()),
                ::testing::HasSubstr("revnet18, revnet34"));
  }
}

}  // namespace
}  // namespace petra::job
