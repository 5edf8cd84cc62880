// Where the replicas of the coordinator's jobs meet: one c10d TCPStore,
// started with the first job that has replicas and kept while the
// coordinator runs. Each job's groups live under names of their own
// (job id, attempt, stage), so jobs and recoveries never meet each other's
// keys. The store is unauthenticated, as torch's is (docs/DEPLOY.md).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/engine/replica_group.h"

namespace petra::coordinator {

class ReplicaRendezvous {
 public:
  // `address` (host:port): the host the stage servers reach the store at,
  // and the port it listens at (0: an ephemeral one).
  // `refusal`, when not empty: why no job with replicas can run here
  // (Usable's FAILED_PRECONDITION).
  explicit ReplicaRendezvous(std::string address, std::string refusal = "");

  // Whether jobs with replicas can be accepted (checked at submission).
  absl::Status Usable() const;
  // host:port of the store as stage servers reach it; starts it on the
  // first call. UNAVAILABLE when it cannot listen, UNIMPLEMENTED when the
  // build has no Gloo (replica_group.h).
  absl::StatusOr<std::string> Address();

  // The --replica-store a coordinator uses when none is given: the host of
  // `listen` (loopback for a wildcard) and an ephemeral port; with a
  // refusal when that host is loopback and a stage server is elsewhere.
  static std::unique_ptr<ReplicaRendezvous> ForFleet(
      const std::string& replica_store, const std::string& listen,
      const std::vector<std::string>& stages);

 private:
  const std::string address_;
  const std::string refusal_;
  std::mutex mu_;
  std::unique_ptr<engine::ReplicaStore> store_;
  std::string reached_at_;
};

}  // namespace petra::coordinator
