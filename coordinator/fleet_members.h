// The fleet: the static --stages list, and the stage servers that
// registered themselves (petra-stage --coordinator) or that --stage-dns
// found (stage_discovery.h), each keeping a lease by renewing it. Placement
// asks it for the addresses at each job start and each recovery, so a server
// that joins is used by the next placement and one whose lease lapsed is not.
// Thread-safe; no gRPC.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/membership.pb.h"

namespace petra::coordinator {

class FleetMembers {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // Registered servers beyond this are refused: a bound on what bogus
  // registrations can make this process hold.
  static constexpr size_t kMaxRegistered = 4096;

  // `lease`: how long a registration lasts unless renewed (at least 1 s).
  FleetMembers(std::vector<std::string> static_addresses,
               std::chrono::seconds lease,
               Clock clock = std::chrono::steady_clock::now);

  struct Registration {
    bool joined = false;  // not a member before this call
    std::chrono::seconds lease{0};
  };
  // Joins or renews. INVALID_ARGUMENT for an address that is not host:port,
  // RESOURCE_EXHAUSTED past kMaxRegistered. A server the static list names
  // is a member already: accepted, with no lease to keep. `origin`: how it
  // was found (the first registration's stays).
  absl::StatusOr<Registration> Register(
      const std::string& address,
      petra::v1::FleetServer::Origin origin =
          petra::v1::FleetServer::ORIGIN_REGISTERED);
  // Leaves at once; false when it was not registered.
  bool Leave(const std::string& address);

  // Every member: static ones in --stages order, then registered ones in
  // the order they joined. Drops (and logs) registrations that lapsed.
  std::vector<std::string> Addresses();

  struct Member {
    std::string address;
    petra::v1::FleetServer::Origin origin =
        petra::v1::FleetServer::ORIGIN_UNSPECIFIED;
    // Registered members: how long until the lease runs out.
    std::optional<std::chrono::steady_clock::duration> lease_left;
  };
  std::vector<Member> Members();

  const std::vector<std::string>& static_addresses() const { return static_; }
  std::chrono::seconds lease() const { return lease_; }

 private:
  void ExpireLocked(std::chrono::steady_clock::time_point now);

  const std::vector<std::string> static_;
  const std::chrono::seconds lease_;
  const Clock clock_;
  std::mutex mu_;
  struct Lease {
    uint64_t order = 0;  // join order
    std::chrono::steady_clock::time_point expires;
    petra::v1::FleetServer::Origin origin =
        petra::v1::FleetServer::ORIGIN_REGISTERED;
  };
  std::map<std::string, Lease> registered_;
  uint64_t next_order_ = 0;
};

}  // namespace petra::coordinator
