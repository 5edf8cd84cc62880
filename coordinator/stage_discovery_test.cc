#include "coordinator/stage_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

namespace petra::coordinator {
namespace {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct MovingClock {
  std::chrono::steady_clock::time_point now{seconds(1000)};
  FleetMembers::Clock fn() {
    return [this] { return now; };
  }
};

// What a headless service answers, as the test sets it.
struct FakeDns {
  absl::StatusOr<std::vector<std::string>> answer;
  std::atomic<int> asked{0};
  StageDiscovery::Resolver fn() {
    return [this](const std::string& name)
               -> absl::StatusOr<std::vector<std::string>> {
      ++asked;
      EXPECT_EQ(name, "petra-stage.petra.svc");
      return answer;
    };
  }
};

std::vector<std::pair<std::string, petra::v1::FleetServer::Origin>> Listed(
    FleetMembers& fleet) {
  std::vector<std::pair<std::string, petra::v1::FleetServer::Origin>> out;
  for (const FleetMembers::Member& m : fleet.Members()) {
    out.emplace_back(m.address, m.origin);
  }
  return out;
}

TEST(StageDiscovery, WhatTheNameGivesJoinsAndWhatItStopsGivingLapses) {
  MovingClock clock;
  FakeDns dns;
  FleetMembers fleet({"s:1"}, seconds(9), clock.fn());
  auto discovery =
      StageDiscovery::Create("petra-stage.petra.svc:50051", &fleet, dns.fn());
  ASSERT_TRUE(discovery.ok()) << discovery.status();
  dns.answer = std::vector<std::string>{"10.0.0.1", "10.0.0.2", "fd00::3"};
  absl::StatusOr<std::vector<std::string>> found = (*discovery)->Round();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_THAT(*found, ElementsAre("10.0.0.1:50051", "10.0.0.2:50051",
                                  "[fd00::3]:50051"));
  constexpr auto kDns = petra::v1::FleetServer::ORIGIN_DNS;
  EXPECT_THAT(
      Listed(fleet),
      ElementsAre(std::pair("s:1", petra::v1::FleetServer::ORIGIN_STATIC),
                  std::pair("10.0.0.1:50051", kDns),
                  std::pair("10.0.0.2:50051", kDns),
                  std::pair("[fd00::3]:50051", kDns)));

  // A pod goes: the name gives two; the one it no longer gives lapses with
  // its lease, the others are renewed by every round.
  clock.now += seconds(5);
  dns.answer = std::vector<std::string>{"10.0.0.1", "fd00::3"};
  ASSERT_TRUE((*discovery)->Round().ok());
  clock.now += seconds(5);
  EXPECT_THAT(fleet.Addresses(),
              ElementsAre("s:1", "10.0.0.1:50051", "[fd00::3]:50051"));

  // The name stops resolving (DNS down): the round says so, and nothing
  // changes until the leases run out.
  dns.answer = absl::NotFoundError("Name or service not known");
  found = (*discovery)->Round();
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(found.status().message(),
            "--stage-dns petra-stage.petra.svc does not resolve: Name or "
            "service not known");
  EXPECT_THAT(fleet.Addresses(),
              ElementsAre("s:1", "10.0.0.1:50051", "[fd00::3]:50051"));
  clock.now += seconds(9);
  EXPECT_THAT(fleet.Addresses(), ElementsAre("s:1"));
}

TEST(StageDiscovery, AServerThatRegisteredItselfKeepsItsOrigin) {
  MovingClock clock;
  FakeDns dns;
  FleetMembers fleet({}, seconds(9), clock.fn());
  ASSERT_TRUE(fleet.Register("10.0.0.1:50051").ok());
  dns.answer = std::vector<std::string>{"10.0.0.1"};
  auto discovery =
      StageDiscovery::Create("petra-stage.petra.svc:50051", &fleet, dns.fn());
  ASSERT_TRUE((*discovery)->Round().ok());
  EXPECT_THAT(Listed(fleet), ElementsAre(std::pair(
                                 "10.0.0.1:50051",
                                 petra::v1::FleetServer::ORIGIN_REGISTERED)));
}

TEST(StageDiscovery, ABadNameOrPortIsRefusedNamingTheFlag) {
  FleetMembers fleet({}, seconds(9));
  for (const char* bad : {"petra-stage", "petra-stage:0", ":50051",
                          "petra-stage:99999", "petra-stage:x"}) {
    absl::Status s = StageDiscovery::Create(bad, &fleet).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("--stage-dns")) << bad;
  }
}

TEST(StageDiscovery, RoundsRunOnTheirOwnThreadUntilStopped) {
  FakeDns dns;
  dns.answer = std::vector<std::string>{"10.0.0.1"};
  FleetMembers fleet({}, seconds(9));
  auto discovery =
      StageDiscovery::Create("petra-stage.petra.svc:50051", &fleet, dns.fn());
  (*discovery)->Start(std::chrono::milliseconds(5));
  for (int i = 0; i < 2000 && dns.asked < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  (*discovery)->Stop();
  const int asked = dns.asked;
  EXPECT_GE(asked, 3);
  EXPECT_THAT(fleet.Addresses(), ElementsAre("10.0.0.1:50051"));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(dns.asked, asked);  // stopped means no more rounds
}

// The system's resolver on a name every machine has.
TEST(StageDiscovery, TheSystemResolverAnswersForLocalhost) {
  absl::StatusOr<std::vector<std::string>> found =
      StageDiscovery::SystemResolver()("localhost");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_THAT(*found, ::testing::Contains("127.0.0.1"));
  EXPECT_FALSE(StageDiscovery::SystemResolver()("no-such-host.invalid").ok());
}

}  // namespace
}  // namespace petra::coordinator
