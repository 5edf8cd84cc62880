#include "coordinator/stage_discovery.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "services/base/event_log.h"
#include "services/base/host_port.h"

namespace petra::coordinator {

StageDiscovery::Resolver StageDiscovery::SystemResolver() {
  return
      [](const std::string& name) -> absl::StatusOr<std::vector<std::string>> {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &found);
        if (rc != 0) {
          const std::string why = ::gai_strerror(rc);
          return rc == EAI_NONAME ? absl::NotFoundError(why)
                                  : absl::UnavailableError(why);
        }
        std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(found,
                                                             ::freeaddrinfo);
        std::vector<std::string> addresses;
        for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
          char host[NI_MAXHOST];
          if (::getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof(host),
                            nullptr, 0, NI_NUMERICHOST) == 0 &&
              std::find(addresses.begin(), addresses.end(), host) ==
                  addresses.end()) {
            addresses.push_back(host);
          }
        }
        return addresses;
      };
}

absl::StatusOr<std::unique_ptr<StageDiscovery>> StageDiscovery::Create(
    const std::string& name_port, FleetMembers* members, Resolver resolve) {
  absl::StatusOr<base::HostPort> hp =
      base::SplitHostPort(name_port, "--stage-dns");
  if (!hp.ok()) return hp.status();
  return std::unique_ptr<StageDiscovery>(
      new StageDiscovery(hp->host, hp->port, members, std::move(resolve)));
}

StageDiscovery::StageDiscovery(std::string name, int port,
                               FleetMembers* members, Resolver resolve)
    : name_(std::move(name)),
      port_(port),
      members_(members),
      resolve_(std::move(resolve)) {}

StageDiscovery::~StageDiscovery() { Stop(); }

absl::StatusOr<std::vector<std::string>> StageDiscovery::Round() {
  absl::StatusOr<std::vector<std::string>> hosts = resolve_(name_);
  if (!hosts.ok()) {
    return absl::Status(
        hosts.status().code(),
        absl::StrCat("--stage-dns ", name_,
                     " does not resolve: ", hosts.status().message()));
  }
  std::vector<std::string> addresses;
  for (const std::string& host : *hosts) {
    const std::string address = base::JoinHostPort(host, port_);
    absl::StatusOr<FleetMembers::Registration> joined =
        members_->Register(address, petra::v1::FleetServer::ORIGIN_DNS);
    if (!joined.ok()) {
      PETRA_LOG_EVENT(kWarning, "member_refused", {"address", address},
                      {"reason", std::string(joined.status().message())});
      continue;
    }
    addresses.push_back(address);
  }
  return addresses;
}

void StageDiscovery::LoggedRound() {
  absl::StatusOr<std::vector<std::string>> found = Round();
  const std::string problem =
      found.ok() ? "" : std::string(found.status().message());
  if (problem != last_problem_ && !problem.empty()) {
    PETRA_LOG_EVENT(kWarning, "stage_dns_failed", {"reason", problem});
  }
  last_problem_ = problem;
}

void StageDiscovery::Start(std::chrono::milliseconds interval) {
  LoggedRound();
  thread_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      LoggedRound();
      lock.lock();
    }
  });
}

void StageDiscovery::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace petra::coordinator
