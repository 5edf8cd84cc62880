#include "services/base/host_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::base {
namespace {

TEST(HostPort, SplitsNamesAddressesAndBracketedIpv6) {
  for (const auto& [in, host, port] :
       {std::tuple<std::string, std::string, int>{"petra-coordinator:29500",
                                                  "petra-coordinator", 29500},
        {"127.0.0.1:1", "127.0.0.1", 1},
        {"[::1]:65535", "::1", 65535}}) {
    absl::StatusOr<HostPort> hp = SplitHostPort(in, "--x");
    ASSERT_TRUE(hp.ok()) << in << ": " << hp.status();
    EXPECT_EQ(hp->host, host);
    EXPECT_EQ(hp->port, port);
  }
}

TEST(HostPort, RefusesWhatIsNotHostAndPort) {
  for (const std::string bad :
       {"", "host", ":5", "host:", "host:0", "host:65536", "host:x"}) {
    absl::StatusOr<HostPort> hp = SplitHostPort(bad, "--replica-store");
    ASSERT_FALSE(hp.ok()) << bad;
    EXPECT_THAT(std::string(hp.status().message()),
                ::testing::HasSubstr("--replica-store"));
  }
}

TEST(HostPort, PortZeroOnlyWhereAServerMayPickOne) {
  EXPECT_FALSE(SplitHostPort("127.0.0.1:0", "--x").ok());
  absl::StatusOr<HostPort> any = SplitHostPort("127.0.0.1:0", "--x", true);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->port, 0);
}

TEST(HostPort, JoinHostPortIsSplitsInverse) {
  EXPECT_EQ(JoinHostPort("10.0.0.2", 29500), "10.0.0.2:29500");
  EXPECT_EQ(JoinHostPort("::1", 5), "[::1]:5");
  for (const std::string address : {"a.b:7", "[fe80::1]:50051"}) {
    absl::StatusOr<HostPort> hp = SplitHostPort(address, "x");
    ASSERT_TRUE(hp.ok()) << address;
    EXPECT_EQ(JoinHostPort(hp->host, hp->port), address);
  }
  EXPECT_TRUE(IsWildcardHost("0.0.0.0"));
  EXPECT_TRUE(IsWildcardHost("::"));
  EXPECT_TRUE(IsWildcardHost(""));
  EXPECT_FALSE(IsWildcardHost("127.0.0.1"));
}

TEST(HostPort, HostOfKeepsAPortlessHost) {
  EXPECT_EQ(HostOf("10.0.0.2:50051"), "10.0.0.2");
  EXPECT_EQ(HostOf("[::1]:50051"), "::1");
  EXPECT_EQ(HostOf("::1"), "::1");
  EXPECT_EQ(HostOf("stage-0"), "stage-0");
}

}  // namespace
}  // namespace petra::base
