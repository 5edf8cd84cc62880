#include "coordinator/fleet_members.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::coordinator {
namespace {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A clock the test moves.
struct FakeClock {
  std::chrono::steady_clock::time_point now{seconds(1000)};
  FleetMembers::Clock fn() {
    return [this] { return now; };
  }
};

TEST(FleetMembers, RegisteredServersFollowTheStaticOnesInJoinOrder) {
  FakeClock clock;
  FleetMembers fleet({"s:1", "s:2"}, seconds(10), clock.fn());
  ASSERT_TRUE(fleet.Register("b:1")->joined);
  ASSERT_TRUE(fleet.Register("a:1")->joined);
  EXPECT_THAT(fleet.Addresses(), ElementsAre("s:1", "s:2", "b:1", "a:1"));
  // A renewal is not a join, and keeps the server's place.
  EXPECT_FALSE(fleet.Register("b:1")->joined);
  EXPECT_THAT(fleet.Addresses(), ElementsAre("s:1", "s:2", "b:1", "a:1"));
  // A static server registering stays static, once.
  absl::StatusOr<FleetMembers::Registration> r = fleet.Register("s:2");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->joined);
  EXPECT_THAT(fleet.Addresses(), ElementsAre("s:1", "s:2", "b:1", "a:1"));
}

TEST(FleetMembers, ALeaseThatLapsesDropsTheServerAndARenewalKeepsIt) {
  FakeClock clock;
  FleetMembers fleet({}, seconds(10), clock.fn());
  ASSERT_TRUE(fleet.Register("a:1").ok());
  ASSERT_TRUE(fleet.Register("b:1").ok());
  clock.now += seconds(6);
  ASSERT_TRUE(fleet.Register("a:1").ok());  // renewed; b is not
  clock.now += seconds(5);
  EXPECT_THAT(fleet.Addresses(), ElementsAre("a:1"));
  std::vector<FleetMembers::Member> members = fleet.Members();
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].origin, petra::v1::FleetServer::ORIGIN_REGISTERED);
  EXPECT_EQ(*members[0].lease_left, seconds(5));
  // Back after the lapse: a new join, at the end.
  EXPECT_TRUE(fleet.Register("b:1")->joined);
  EXPECT_THAT(fleet.Addresses(), ElementsAre("a:1", "b:1"));
  clock.now += seconds(10);
  EXPECT_THAT(fleet.Addresses(), ElementsAre());
}

TEST(FleetMembers, LeavingIsImmediate) {
  FakeClock clock;
  FleetMembers fleet({"s:1"}, seconds(10), clock.fn());
  ASSERT_TRUE(fleet.Register("a:1").ok());
  EXPECT_TRUE(fleet.Leave("a:1"));
  EXPECT_FALSE(fleet.Leave("a:1"));
  EXPECT_FALSE(fleet.Leave("s:1"));  // static servers stay
  EXPECT_THAT(fleet.Addresses(), ElementsAre("s:1"));
}

TEST(FleetMembers, BadAddressesAndTooManyServersAreRefused) {
  FakeClock clock;
  FleetMembers fleet({}, seconds(10), clock.fn());
  for (const char* bad : {"", "host", "host:0", "host:70000", ":5"}) {
    absl::StatusOr<FleetMembers::Registration> r = fleet.Register(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  for (size_t i = 0; i < FleetMembers::kMaxRegistered; ++i) {
    ASSERT_TRUE(fleet.Register("h:" + std::to_string(i + 1)).ok());
  }
  absl::StatusOr<FleetMembers::Registration> r = fleet.Register("x:1");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("4096"));
  // A renewal of a member is still accepted at the cap.
  EXPECT_TRUE(fleet.Register("h:1").ok());
}

TEST(FleetMembers, ALeaseIsAtLeastOneSecond) {
  FleetMembers fleet({}, seconds(0));
  EXPECT_EQ(fleet.lease(), seconds(1));
}

}  // namespace
}  // namespace petra::coordinator
