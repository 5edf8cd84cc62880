// Client of the standard gRPC health service (grpc.health.v1.Health/Check),
// spoken as raw messages so no generated health stubs are needed. Used by
// `petra health` (the container and Kubernetes probes) and by the tests.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "services/wire/transport_security.h"

namespace petra::wire {

// grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class ServingStatus {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,
};

const char* ServingStatusName(ServingStatus status);

// Asks the server at `address` for the status of `service` ("" means the
// whole server), over `security`. Fails when the call fails (unreachable,
// deadline, a TLS handshake refused, a server without the health service)
// or the answer cannot be read. The health service needs no bearer token.
absl::StatusOr<ServingStatus> CheckHealth(
    const std::string& address, const std::string& service,
    std::chrono::milliseconds timeout,
    const TransportSecurity& security = TransportSecurity());

}  // namespace petra::wire
