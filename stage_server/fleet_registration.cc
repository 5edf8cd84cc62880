#include "stage_server/fleet_registration.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "petra/v1/membership.grpc.pb.h"
#include "services/base/event_log.h"
#include "services/base/host_port.h"
#include "services/wire/grpc_defaults.h"

namespace petra::stage_server {
namespace {

using std::chrono::seconds;

constexpr seconds kRegisterRetry{2};
constexpr seconds kRegisterDeadline{5};

// This machine's address on the route to host:port: a UDP socket
// "connected" there (nothing is sent) is bound to it.
absl::StatusOr<std::string> LocalAddressToward(const base::HostPort& peer) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(peer.host.c_str(), std::to_string(peer.port).c_str(),
                           &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve the coordinator's host ", peer.host, ": ",
                     gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, freeaddrinfo);
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    const bool ok =
        connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!ok) error = strerror(errno);
    close(fd);
    if (!ok) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) {
      return std::string(text);
    }
  }
  return absl::UnavailableError(absl::StrCat(
      "no route to the coordinator's host ", peer.host, ": ", error));
}

}  // namespace

absl::StatusOr<std::string> AdvertisedAddress(const std::string& advertise,
                                              const std::string& listen,
                                              int port,
                                              const std::string& coordinator) {
  if (!advertise.empty()) {
    if (advertise.find(':') == std::string::npos ||
        (advertise.front() == '[' && advertise.back() == ']')) {
      std::string host = advertise;
      if (host.front() == '[') host = host.substr(1, host.size() - 2);
      return base::JoinHostPort(host, port);
    }
    absl::StatusOr<base::HostPort> hp =
        base::SplitHostPort(advertise, "--advertise-address");
    if (!hp.ok()) return hp.status();
    return advertise;
  }
  const std::string host = base::HostOf(listen);
  if (!base::IsWildcardHost(host)) {
    return base::JoinHostPort(host, port);
  }
  absl::StatusOr<base::HostPort> peer =
      base::SplitHostPort(coordinator, "--coordinator");
  if (!peer.ok()) return peer.status();
  absl::StatusOr<std::string> local = LocalAddressToward(*peer);
  if (!local.ok()) return local.status();
  return base::JoinHostPort(*local, port);
}

FleetRegistration::FleetRegistration(Options options)
    : options_(std::move(options)),
      stub_(petra::v1::FleetService::NewStub(wire::CreateChannel(
          options_.coordinator, options_.security, options_.fleet_token))),
      thread_([this] { Run(); }) {}

FleetRegistration::~FleetRegistration() { Leave(); }

void FleetRegistration::Run() {
  std::string address;
  std::string last_error;
  seconds wait = kRegisterRetry;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    absl::Status status;
    if (address.empty()) {
      absl::StatusOr<std::string> a =
          AdvertisedAddress(options_.advertise, options_.listen, options_.port,
                            options_.coordinator);
      if (a.ok()) {
        address = *a;
      } else {
        status = a.status();
      }
    }
    petra::v1::RegisterResponse response;
    if (status.ok()) {
      petra::v1::RegisterRequest request;
      request.set_address(address);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           kRegisterDeadline);
      grpc::Status s = stub_->Register(&context, request, &response);
      if (!s.ok()) {
        status = absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                              s.error_message());
      }
    }
    if (status.ok()) {
      if (response.joined() || !last_error.empty()) {
        PETRA_LOG_EVENT(
            kInfo, "fleet_joined", {"coordinator", options_.coordinator},
            {"address", address},
            {"lease_seconds", absl::StrCat(response.lease_seconds())});
      }
      last_error.clear();
      wait =
          std::max<seconds>(seconds(1), seconds(response.lease_seconds() / 3));
    } else {
      const std::string error(status.message());
      if (error != last_error) {
        PETRA_LOG_EVENT(kWarning, "fleet_register_failed",
                        {"coordinator", options_.coordinator},
                        {"address", address}, {"detail", error});
      }
      last_error = error;
      wait = kRegisterRetry;
    }
    lock.lock();
    if (!address.empty()) address_ = address;
    cv_.wait_for(lock, wait, [this] { return stopping_; });
  }
}

void FleetRegistration::Leave() {
  std::string address;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    address = address_;
  }
  cv_.notify_all();
  thread_.join();
  if (address.empty()) return;
  petra::v1::LeaveRequest request;
  request.set_address(address);
  petra::v1::LeaveResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(2));
  grpc::Status s = stub_->Leave(&context, request, &response);
  PETRA_LOG_EVENT_IF(s.ok() ? base::LogLevel::kInfo : base::LogLevel::kWarning,
                     "fleet_left", {"coordinator", options_.coordinator},
                     {"address", address},
                     {"detail", s.ok() ? "" : s.error_message()});
}

}  // namespace petra::stage_server
