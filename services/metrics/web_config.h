// /metrics behind basic auth, configured as Prometheus' own exporters are
// (the exporter-toolkit "web configuration file", YAML):
//
//   basic_auth_users:
//     prometheus: $2y$10$...      # bcrypt, e.g. htpasswd -nBC 10 "" | tr -d
//     ':'
//
// What else that format offers is refused by name rather than ignored:
// tls_server_config too: Debian 12's civetweb (prometheus-cpp's HTTP
// server) loads OpenSSL at run time, and with Debian's OpenSSL 3 it
// crashed on its first TLS connection (a call through a null pointer in
// its worker thread; tried on 2026-11-28).
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace petra::metrics {

struct WebConfig {
  // User -> bcrypt hash; empty: no authentication.
  std::map<std::string, std::string> basic_auth_users;
};

// The file at `path` ("" gives the empty config: no auth),
// checked: known keys only, every hash bcrypt.
// `flag` starts the errors.
absl::StatusOr<WebConfig> ReadWebConfig(const std::string& path,
                                        const std::string& flag);

// Whether an `Authorization` header's value (nullptr: none) names a user
// of `config` with the right password. True when the config has no users.
bool BasicAuthAllows(const WebConfig& config, const char* authorization);

// The servers' --metrics-web-config help: what ReadWebConfig takes.
inline constexpr char kWebConfigHelp[] =
    "Prometheus web configuration for /metrics (YAML: basic_auth_users with "
    "bcrypt hashes; tls_server_config is refused: keep /metrics on the "
    "fleet's network); empty = plain HTTP, no credentials (docs/DEPLOY.md)";

}  // namespace petra::metrics
