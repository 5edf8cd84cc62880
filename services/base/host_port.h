// host:port addresses as flags and messages carry them ("[::1]:50051" for
// IPv6).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace petra::base {

struct HostPort {
  std::string host;  // without IPv6 brackets
  int port = 0;
};

// INVALID_ARGUMENT naming `what` when `address` has no host or no port in
// 1..65535 (0..65535 with `allow_port_zero`, for a server's "any port").
absl::StatusOr<HostPort> SplitHostPort(const std::string& address,
                                       const std::string& what,
                                       bool allow_port_zero = false);

// The host of `address` (as SplitHostPort), or `address` whole when it has
// no port.
std::string HostOf(const std::string& address);

// "host:port", an IPv6 host in brackets: SplitHostPort's inverse.
std::string JoinHostPort(const std::string& host, int port);

// A listen host that means every interface ("0.0.0.0", "::"), or none.
bool IsWildcardHost(const std::string& host);

}  // namespace petra::base
