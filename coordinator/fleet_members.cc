#include "coordinator/fleet_members.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/base/event_log.h"
#include "services/base/host_port.h"

namespace petra::coordinator {

using std::chrono::steady_clock;

FleetMembers::FleetMembers(std::vector<std::string> static_addresses,
                           std::chrono::seconds lease, Clock clock)
    : static_(std::move(static_addresses)),
      lease_(std::max(lease, std::chrono::seconds(1))),
      clock_(std::move(clock)) {}

absl::StatusOr<FleetMembers::Registration> FleetMembers::Register(
    const std::string& address, petra::v1::FleetServer::Origin origin) {
  absl::StatusOr<base::HostPort> hp =
      base::SplitHostPort(address, "the registered address");
  if (!hp.ok()) return hp.status();
  if (std::find(static_.begin(), static_.end(), address) != static_.end()) {
    return Registration{false, std::chrono::seconds(0)};
  }
  const steady_clock::time_point now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto it = registered_.find(address);
  const bool joined = it == registered_.end();
  if (joined) {
    if (registered_.size() >= kMaxRegistered) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the fleet has ", registered_.size(),
          " registered stage servers, the most one coordinator keeps"));
    }
    it = registered_.emplace(address, Lease{next_order_++, now, origin}).first;
    PETRA_LOG_EVENT(
        kInfo, "member_joined", {"address", address},
        {"origin",
         origin == petra::v1::FleetServer::ORIGIN_DNS ? "dns" : "registered"},
        {"lease_seconds", absl::StrCat(lease_.count())});
  }
  it->second.expires = now + lease_;
  return Registration{joined, lease_};
}

bool FleetMembers::Leave(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  if (registered_.erase(address) == 0) return false;
  PETRA_LOG_EVENT(kInfo, "member_left", {"address", address});
  return true;
}

void FleetMembers::ExpireLocked(steady_clock::time_point now) {
  for (auto it = registered_.begin(); it != registered_.end();) {
    if (it->second.expires <= now) {
      PETRA_LOG_EVENT(
          kWarning, "member_lost", {"address", it->first},
          {"detail", absl::StrCat("no renewal within ", lease_.count(), " s")});
      it = registered_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<FleetMembers::Member> FleetMembers::Members() {
  std::vector<Member> members;
  for (const std::string& a : static_) {
    members.push_back({a, petra::v1::FleetServer::ORIGIN_STATIC, {}});
  }
  const steady_clock::time_point now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  std::vector<std::pair<uint64_t, Member>> joined;
  for (const auto& [address, lease] : registered_) {
    joined.push_back(
        {lease.order, {address, lease.origin, lease.expires - now}});
  }
  std::sort(joined.begin(), joined.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, m] : joined) members.push_back(std::move(m));
  return members;
}

std::vector<std::string> FleetMembers::Addresses() {
  std::vector<std::string> addresses;
  for (Member& m : Members()) addresses.push_back(std::move(m.address));
  return addresses;
}

}  // namespace petra::coordinator
