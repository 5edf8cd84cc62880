// What both servers (petra-stage-server, petra-coordinator) are built on,
// whatever they serve: where they listen, their /metrics endpoint, TLS,
// the fleet token and their state directory, checked when the server is
// created and started and stopped the same way (as Triton's core gives
// every front end one Create/Start/GracefulStop). Each server keeps only
// what is its own: its options, its services, what it drains on a stop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/metrics/web_config.h"
#include "services/wire/transport_security.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc
namespace prometheus {
class Registry;
}  // namespace prometheus
namespace petra::metrics {
class MetricsExposer;
}  // namespace petra::metrics

namespace petra::server {

// The options every server has (each server's Options holds one).
struct FrameOptions {
  // gRPC address (host:port; port 0 picks a free port).
  std::string listen;
  // Prometheus /metrics address; empty disables it.
  std::string metrics_listen;
  // /metrics over TLS and with basic auth (metrics/web_config.h).
  std::string metrics_web_config;
  // Created when missing; must be writable.
  std::string state_dir;
  // TLS of the gRPC server; empty = plaintext.
  wire::TlsOptions tls;
  // File holding the fleet token; empty = none.
  std::string fleet_token_file;
};

class ServerFrame {
 public:
  // Checks `options` and loads their files (TLS, the fleet token, the web
  // config) without binding anything. `identity_flag`/`identity`: a
  // server's flag naming the certificate its callers must present, which
  // needs mutual TLS (empty: none given).
  static absl::StatusOr<std::unique_ptr<ServerFrame>> Create(
      FrameOptions options, const std::string& identity_flag = "",
      const std::string& identity = "");
  ~ServerFrame();

  // Serves /metrics as `component` when metrics_listen is set; the
  // registry is then where the server's metrics go (nullptr without).
  absl::Status StartMetrics(const std::string& component);
  prometheus::Registry* registry();
  // Serves `services` on listen, over the loaded TLS.
  absl::Status StartServing(const std::vector<grpc::Service*>& services);
  bool serving() const { return server_ != nullptr; }

  // A stop's first step: health checks say NOT_SERVING, so that readiness
  // probes see the drain at once (and no new job is routed here).
  void StopAdvertising();
  // Then: running calls get a few seconds to finish, then they are
  // cancelled so that a stuck peer cannot hold the process up.
  void StopServing();
  // Last, once nothing uses the registry any more: /metrics stops.
  void StopMetrics();

  const FrameOptions& options() const { return options_; }
  const wire::TransportSecurity& security() const { return security_; }
  const std::string& fleet_token() const { return fleet_token_; }
  int port() const { return port_; }
  int metrics_port() const;

 private:
  explicit ServerFrame(FrameOptions options);
  FrameOptions options_;
  wire::TransportSecurity security_;
  metrics::WebConfig metrics_web_;
  std::string fleet_token_;
  // Outlives the server's own members that point into its registry (a
  // server holds its frame first, so that it goes last).
  std::unique_ptr<metrics::MetricsExposer> metrics_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace petra::server
