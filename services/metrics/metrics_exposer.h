// The /metrics endpoint every PETRA process serves (Prometheus pull model),
// with the build-info gauge every process exports.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace petra::metrics {

class MetricsExposer {
 public:
  // Serves /metrics on `address` (host:port; port 0 picks a free one) and
  // registers petra_build_info{component, version}. UNAVAILABLE when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& address, const std::string& component);
  ~MetricsExposer();

  // The port actually bound.
  int port() const { return port_; }
  // Where components register their metrics.
  prometheus::Registry& registry() { return *registry_; }

 private:
  MetricsExposer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

}  // namespace petra::metrics
