#include "services/base/host_port.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace petra::base {
namespace {

std::string Unbracketed(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

absl::StatusOr<HostPort> SplitHostPort(const std::string& address,
                                       const std::string& what,
                                       bool allow_port_zero) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < (allow_port_zero ? 0 : 1) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": \"", address,
        "\" is not host:port (e.g. 10.0.0.2:29500 or [::1]:29500, a port in ",
        allow_port_zero ? 0 : 1, "..65535)"));
  }
  return HostPort{Unbracketed(address.substr(0, colon)), port};
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  // "::1" alone is a host; "[::1]:5" and "a:5" are host:port.
  if (colon == std::string::npos ||
      (address.front() != '[' && address.find(':') != colon)) {
    return address;
  }
  return Unbracketed(address.substr(0, colon));
}

std::string JoinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::";
}

}  // namespace petra::base
