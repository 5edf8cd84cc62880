#include "coordinator/stage_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ExpandStageList, PlainList) {
  auto r = ExpandStageList("127.0.0.1:5001, 127.0.0.1:5002");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("127.0.0.1:5001", "127.0.0.1:5002"));
}

TEST(ExpandStageList, KubernetesPattern) {
  auto r = ExpandStageList("petra-stage-{0..2}.petra-stage:50051");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("petra-stage-0.petra-stage:50051",
                              "petra-stage-1.petra-stage:50051",
                              "petra-stage-2.petra-stage:50051"));
}

TEST(ExpandStageList, PatternMixedWithPlain) {
  auto r = ExpandStageList("a:1,host{3..4}:2");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("a:1", "host3:2", "host4:2"));
}

TEST(ExpandStageList, ErrorsNameTheFlag) {
  struct Case {
    std::string value;
    std::string expected;
  };
  for (const Case& c :
       std::vector<Case>{{"", "no stage server addresses"},
                         {" , ", "no stage server addresses"},
                         {"a:1,a:1", "appears twice"},
                         {"s-{3..1}:1", "range must be"},
                         {"s-{0..x}:1", "range must be"},
                         {"s-{0..1}-{0..1}:1", "exactly one range"},
                         {"s-{0,1}:1", "exactly one range"},
                         {"s}:1", "without '{'"},
                         {"noport", "has no port"},
                         {":50051", "has no host"},
                         {"h:0", "port 0"},
                         {"s-{0..99999}:1", "more than 4096"}}) {
    auto r = ExpandStageList(c.value);
    ASSERT_FALSE(r.ok()) << c.value;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--stages"))
        << c.value;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.expected))
        << c.value;
  }
}

}  // namespace
}  // namespace petra::coordinator
