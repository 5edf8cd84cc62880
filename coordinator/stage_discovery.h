// Stage servers found through DNS (--stage-dns NAME:PORT): a Kubernetes
// headless service answers with one address per ready pod. Every few
// seconds the name is resolved again and each address found joins the
// fleet, or renews, with a lease (FleetMembers, origin DNS); an address
// the name no longer gives lapses as a registered server's does. What it
// finds is probed by placement and by `petra servers` like any member. No
// gRPC.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/fleet_members.h"

namespace petra::coordinator {

class StageDiscovery {
 public:
  // A name's addresses (numeric IPv4 or IPv6, no port); NOT_FOUND or
  // UNAVAILABLE when it does not resolve.
  using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(
      const std::string& name)>;
  // getaddrinfo, TCP, IPv4 and IPv6.
  static Resolver SystemResolver();

  // `name_port`: NAME:PORT, checked (INVALID_ARGUMENT naming --stage-dns).
  static absl::StatusOr<std::unique_ptr<StageDiscovery>> Create(
      const std::string& name_port, FleetMembers* members,
      Resolver resolve = SystemResolver());
  ~StageDiscovery();

  // Resolves once and registers every address found ("ip:port",
  // "[ipv6]:port"); returns them. An error leaves the fleet as it was
  // (what was found before lapses unless found again).
  absl::StatusOr<std::vector<std::string>> Round();
  // A first round now (so that the first job finds what it finds), then
  // one every `interval` on a thread of its own until Stop or destruction.
  // A failed round is logged when its reason changes (a name that does not
  // resolve yet, pods still starting, is tried again).
  void Start(std::chrono::milliseconds interval);
  void Stop();

 private:
  StageDiscovery(std::string name, int port, FleetMembers* members,
                 Resolver resolve);
  // A round, its failure logged unless it is the last one's again.
  void LoggedRound();

  const std::string name_;
  const int port_;
  FleetMembers* const members_;
  const Resolver resolve_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::string last_problem_;  // the first round's, then the thread's
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace petra::coordinator
