// Talking to a running server the way outside tools do: the standard gRPC
// health and reflection services (as raw messages, like grpc_health_probe
// and grpcurl) and plain HTTP for /metrics.
#pragma once

#include <string>

namespace petra::testing {

// The status of grpc.health.v1.Health/Check for the whole server:
// 1 = SERVING, 2 = NOT_SERVING, 0 = UNKNOWN, -1 when the call failed.
int HealthCheck(const std::string& address);

// The raw bytes of grpc.reflection.v1alpha's list_services answer; it holds
// every service name. Empty when the call failed.
std::string ReflectionListServices(const std::string& address);

// Body of GET http://127.0.0.1:<port><path>; empty on failure.
std::string HttpGet(int port, const std::string& path);

// A loopback port nothing listens on: bound, then released. For an address
// that must be unreachable, or for a server that cannot report the port it
// bound (Prometheus).
int UnusedLoopbackPort();

}  // namespace petra::testing
