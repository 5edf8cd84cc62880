#include "services/catalog/device_name.h"

#include <gtest/gtest.h>

namespace petra::catalog {
namespace {

TEST(DeviceName, ParsesKnownForms) {
  EXPECT_EQ(ParseDeviceName("cpu", "d")->type, DeviceName::Type::kCpu);
  absl::StatusOr<DeviceName> cuda = ParseDeviceName("cuda", "d");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->type, DeviceName::Type::kCuda);
  EXPECT_EQ(cuda->index, -1);
  absl::StatusOr<DeviceName> cuda3 = ParseDeviceName("cuda:3", "d");
  ASSERT_TRUE(cuda3.ok());
  EXPECT_EQ(cuda3->index, 3);
}

TEST(DeviceName, RefusesEverythingElse) {
  for (const char* bad :
       {"", "CPU", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:+1", "cuda:1024",
        "cuda:1 ", "mps", "cuda:0:1"}) {
    absl::StatusOr<DeviceName> d = ParseDeviceName(bad, "devices[2]");
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("devices[2]"), std::string::npos);
  }
}

TEST(DeviceName, AServerServesItsKindAndOrdinal) {
  EXPECT_TRUE(DeviceServes("cpu", "cpu"));
  EXPECT_TRUE(DeviceServes("cuda:1", "cuda:1"));
  EXPECT_TRUE(DeviceServes("cuda:1", "cuda"));  // any GPU will do
  EXPECT_TRUE(DeviceServes("cuda", "cuda:0"));
  EXPECT_FALSE(DeviceServes("cuda", "cuda:1"));  // plain "cuda" is GPU 0
  EXPECT_FALSE(DeviceServes("cuda:0", "cuda:1"));
  EXPECT_FALSE(DeviceServes("cpu", "cuda"));
  EXPECT_FALSE(DeviceServes("cuda", "cpu"));
  EXPECT_FALSE(DeviceServes("cpu", "gpu"));
}

}  // namespace
}  // namespace petra::catalog
