// A stage server's membership of the fleet (--coordinator): registers with
// the coordinator, renews the lease every third of it, registers again
// after the coordinator was away (a restart forgets its members), and
// leaves when the server stops. Failures are logged when they change, and
// retried every few seconds: a coordinator that starts later is joined
// once it is up.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "petra/v1/membership.grpc.pb.h"
#include "services/wire/transport_security.h"

namespace petra::stage_server {

// The address the fleet reaches this server at. `advertise`: HOST or
// HOST:PORT (--advertise-address; without a port, `port`). Empty: the host
// of `listen` unless it is a wildcard, else this machine's address on the
// route to `coordinator` (a pod's or a container's IP).
absl::StatusOr<std::string> AdvertisedAddress(const std::string& advertise,
                                              const std::string& listen,
                                              int port,
                                              const std::string& coordinator);

class FleetRegistration {
 public:
  struct Options {
    std::string coordinator;  // host:port of its --listen
    std::string advertise;    // as AdvertisedAddress takes it
    std::string listen;
    int port = 0;  // bound
    wire::TransportSecurity security;
    std::string fleet_token;  // "" sends none
  };
  // Starts registering on a thread of its own.
  explicit FleetRegistration(Options options);
  // Leaves the fleet (best effort, a short deadline) and stops.
  ~FleetRegistration();
  void Leave();

 private:
  void Run();

  const Options options_;
  // One channel for the registrations and the leave (before thread_,
  // which uses it from its first moment).
  const std::unique_ptr<petra::v1::FleetService::Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string address_;  // once known
  std::thread thread_;
};

}  // namespace petra::stage_server
