#include "coordinator/server_claims.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::vector<std::string> kFleet = {"a:1", "b:1", "c:1", "d:1"};

TEST(ServerClaims, JobsReserveWhatIsFreeAndClaimDisjointServers) {
  ServerClaims claims;
  EXPECT_TRUE(claims.Reserve("job-1", "ann", 2, kFleet));
  EXPECT_TRUE(claims.Reserve("job-2", "bob", 2, kFleet));
  // Two reserved twice: nothing is free for a third job.
  EXPECT_FALSE(claims.Reserve("job-3", "ann", 1, kFleet));
  ASSERT_TRUE(claims.Claim("job-1", {"a:1", "b:1"}).ok());
  // A server another job holds is refused, naming it and its job.
  const absl::Status taken = claims.Claim("job-2", {"b:1", "c:1"});
  EXPECT_TRUE(absl::IsFailedPrecondition(taken));
  EXPECT_THAT(taken.message(), HasSubstr("b:1 is held by job job-1"));
  ASSERT_TRUE(claims.Claim("job-2", {"c:1", "d:1"}).ok());
  EXPECT_THAT(claims.HeldByOthers("job-1"), ElementsAre("c:1", "d:1"));
  EXPECT_EQ(claims.ServersByJob(),
            (std::map<std::string, int>{{"job-1", 2}, {"job-2", 2}}));
  // A job that ends lets go: its servers can be reserved again.
  claims.Release("job-1");
  EXPECT_THAT(claims.HeldByOthers("job-2"), IsEmpty());
  EXPECT_TRUE(claims.Reserve("job-3", "ann", 2, kFleet));
  EXPECT_FALSE(claims.Reserve("job-4", "bob", 1, kFleet));
}

TEST(ServerClaims, AReclaimReplacesAJobsServers) {
  ServerClaims claims;
  ASSERT_TRUE(claims.Claim("job-1", {"a:1", "b:1"}).ok());
  // After a recovery the job holds what it chose then, not the lost one.
  ASSERT_TRUE(claims.Claim("job-1", {"a:1", "c:1"}).ok());
  EXPECT_THAT(claims.HeldByOthers("job-2"), ElementsAre("a:1", "c:1"));
  ASSERT_TRUE(claims.Claim("job-2", {"b:1"}).ok());
}

TEST(ServerClaims, AnIdleFleetTakesAJobLargerThanItsFreeServers) {
  ServerClaims claims;
  // It starts and says why it cannot run, as it would alone.
  EXPECT_TRUE(claims.Reserve("job-1", "ann", 6, kFleet));
  claims.Release("job-1");
  ASSERT_TRUE(claims.Claim("job-2", {"a:1"}).ok());
  EXPECT_FALSE(claims.Reserve("job-3", "ann", 6, kFleet));
}

TEST(ServerClaims, CountsEachOwnersJobsAndServers) {
  ServerClaims claims;
  ASSERT_TRUE(claims.Reserve("job-1", "ann", 2, kFleet));
  ASSERT_TRUE(claims.Reserve("job-2", "ann", 1, kFleet));
  ASSERT_TRUE(claims.Claim("job-1", {"a:1", "b:1"}).ok());
  EXPECT_EQ(claims.JobsOf("ann"), 2);
  EXPECT_EQ(claims.ServersOf("ann"), 3);  // two held, one reserved
  EXPECT_EQ(claims.JobsOf("bob"), 0);
  claims.Release("job-2");
  EXPECT_EQ(claims.JobsOf("ann"), 1);
  EXPECT_EQ(claims.ServersOf("ann"), 2);
}

}  // namespace
}  // namespace petra::coordinator
