#include "coordinator/replica_rendezvous.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/host_port.h"

namespace petra::coordinator {
namespace {

// How long a stage may take to reach the store (its Assign waits as long).
constexpr std::chrono::milliseconds kStoreTimeout{60000};

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace

ReplicaRendezvous::ReplicaRendezvous(std::string address, std::string refusal)
    : address_(std::move(address)), refusal_(std::move(refusal)) {}

std::unique_ptr<ReplicaRendezvous> ReplicaRendezvous::ForFleet(
    const std::string& replica_store, const std::string& listen,
    const std::vector<std::string>& stages) {
  if (!replica_store.empty()) {
    return std::make_unique<ReplicaRendezvous>(replica_store);
  }
  std::string host = base::HostOf(listen);
  if (base::IsWildcardHost(host)) host = "127.0.0.1";
  std::string address = base::JoinHostPort(host, 0);
  std::string refusal;
  if (IsLoopback(host)) {
    for (const std::string& s : stages) {
      if (!IsLoopback(base::HostOf(s))) {
        refusal = absl::StrCat(
            "replicas: the stage servers (", s,
            ") cannot reach this coordinator's replica store on ", host,
            "; start the coordinator with --replica-store HOST:PORT, a host "
            "they reach it at");
        break;
      }
    }
  }
  return std::make_unique<ReplicaRendezvous>(std::move(address),
                                             std::move(refusal));
}

absl::Status ReplicaRendezvous::Usable() const {
  return refusal_.empty() ? absl::OkStatus()
                          : absl::FailedPreconditionError(refusal_);
}

absl::StatusOr<std::string> ReplicaRendezvous::Address() {
  if (absl::Status s = Usable(); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (store_ != nullptr) return reached_at_;
  absl::StatusOr<base::HostPort> at =
      base::SplitHostPort(address_, "--replica-store", true);
  if (!at.ok()) return at.status();
  // The store listens on every interface; the coordinator's own connection
  // to it goes over loopback (a Service's name need not lead back to the
  // pod that serves it).
  absl::StatusOr<std::unique_ptr<engine::ReplicaStore>> store =
      engine::ReplicaStore::Start("127.0.0.1", at->port, kStoreTimeout);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  reached_at_ = base::JoinHostPort(at->host, store_->port());
  return reached_at_;
}

}  // namespace petra::coordinator
