#include "coordinator/replica_rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/base/host_port.h"

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;

// With no --replica-store, a coordinator listening on every interface
// offers its store on loopback: fine for a fleet on this host, refused
// (before any job runs) for one with servers elsewhere.
TEST(ReplicaRendezvous, TheDefaultStoreIsRefusedToServersElsewhere) {
  auto far = ReplicaRendezvous::ForFleet("", "0.0.0.0:50050",
                                         {"127.0.0.1:1", "10.0.0.2:50051"});
  absl::Status s = far->Usable();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--replica-store HOST:PORT"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("10.0.0.2:50051"));
  EXPECT_EQ(far->Address().status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Named explicitly, the same fleet is fine.
  EXPECT_TRUE(ReplicaRendezvous::ForFleet("10.0.0.1:29500", "0.0.0.0:50050",
                                          {"10.0.0.2:50051"})
                  ->Usable()
                  .ok());
}

TEST(ReplicaRendezvous, ALocalFleetMeetsOnLoopbackAtAnEphemeralPort) {
  auto here = ReplicaRendezvous::ForFleet("", "0.0.0.0:0",
                                          {"127.0.0.1:1", "localhost:2"});
  ASSERT_TRUE(here->Usable().ok());
  absl::StatusOr<std::string> a = here->Address();
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<base::HostPort> hp = base::SplitHostPort(*a, "store");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_GT(hp->port, 0);
  // Started once: every job meets at the same store.
  EXPECT_EQ(*here->Address(), *a);
}

}  // namespace
}  // namespace petra::coordinator
