// The /metrics endpoint every PETRA process serves (Prometheus pull model),
// with the build-info gauge every process exports.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/metrics/web_config.h"

class CivetServer;
namespace prometheus {
class Registry;
}  // namespace prometheus

namespace petra::metrics {

class MetricsExposer {
 public:
  // Serves /metrics on `address` (host:port; port 0 picks a free one) and
  // registers petra_build_info{component, version}. UNAVAILABLE when the
  // address cannot be bound. Only the registry's metrics are served, in
  // the text format with NaN spelt as it specifies (prometheus-cpp's own
  // exposer printed "Nan" and added its own metrics in microseconds).
  // `web`: basic auth (web_config.h); a request without the right
  // credentials gets 401.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& address, const std::string& component,
      const WebConfig& web = WebConfig());
  ~MetricsExposer();

  // The port actually bound.
  int port() const { return port_; }
  // Where components register their metrics.
  prometheus::Registry& registry() { return *registry_; }

 private:
  class Handler;
  explicit MetricsExposer(WebConfig web);
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CivetServer> server_;  // after handler_: stops first
  int port_ = 0;
  std::string connect_host_;  // where the destructor wakes the server
};

}  // namespace petra::metrics
