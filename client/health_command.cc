// One grpc.health.v1 check, for container health checks, Kubernetes probes
// and scripts: `petra health`, and the small `petra-health` binary (no
// libtorch: it is what the probes run, every few seconds in every pod).
#include "client/health_command.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "services/base/flag_set.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/health_check.h"
#include "services/wire/tls_flags.h"

namespace petra::client {

int RunHealthCheck(const std::string& command,
                   const std::vector<std::string>& args) {
  std::string address = "localhost:50051", service;
  double timeout_seconds = 5;
  wire::TlsOptions tls;
  base::FlagSet flags(
      absl::StrCat(command, " [--address HOST:PORT] [--service NAME]"),
      "Asks a stage server or coordinator whether it is serving, through the\n"
      "standard gRPC health service. Exit 0 when SERVING; 1 when it answers\n"
      "anything else or cannot be reached; 2 on bad flags. A TLS server\n"
      "needs --tls-ca (and, under mutual TLS, --tls-cert and --tls-key);\n"
      "no bearer token is needed.");
  flags.AddString("address", &address, "server to check, host:port");
  flags.AddString("service", &service,
                  "service name to check; empty means the whole server");
  flags.AddDouble("timeout-seconds", &timeout_seconds,
                  "give up after this long");
  wire::AddClientTlsFlags(flags, &tls);
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0) {
    return rc;
  }
  if (absl::Status s = wire::ValidateAddress(address, "--address", false);
      !s.ok()) {
    std::cerr << command << ": " << s.message() << "\n";
    return 2;
  }
  if (!(timeout_seconds > 0 && timeout_seconds <= 3600)) {
    std::cerr << command << ": --timeout-seconds must be in (0, 3600], got "
              << timeout_seconds << "\n";
    return 2;
  }
  absl::StatusOr<wire::TransportSecurity> security =
      wire::LoadTransportSecurity(tls, wire::TlsRole::kClient);
  if (!security.ok()) {
    std::cerr << command << ": " << security.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<wire::ServingStatus> status = wire::CheckHealth(
      address, service,
      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)),
      *security);
  if (!status.ok()) {
    std::cerr << command << ": " << status.status().message() << "\n";
    return 1;
  }
  std::cout << address << (service.empty() ? "" : " " + service) << ": "
            << wire::ServingStatusName(*status) << "\n";
  return *status == wire::ServingStatus::kServing ? 0 : 1;
}

int RunHealth(const std::string& program,
              const std::vector<std::string>& args) {
  return RunHealthCheck(program + " health", args);
}

}  // namespace petra::client
