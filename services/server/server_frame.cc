#include "services/server/server_frame.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/base/paths.h"
#include "services/link/endpoint.h"
#include "services/metrics/metrics_exposer.h"
#include "services/wire/bearer_token.h"
#include "services/wire/grpc_defaults.h"

namespace petra::server {

ServerFrame::ServerFrame(FrameOptions options) : options_(std::move(options)) {}
ServerFrame::~ServerFrame() {
  StopServing();
  StopMetrics();
}

absl::StatusOr<std::unique_ptr<ServerFrame>> ServerFrame::Create(
    FrameOptions options, const std::string& identity_flag,
    const std::string& identity) {
  if (absl::Status s = link::CheckTransportsEnvironment(); !s.ok()) return s;
  if (absl::Status s = wire::ValidateAddress(options.listen, "--listen", true);
      !s.ok()) {
    return s;
  }
  if (!options.metrics_listen.empty()) {
    if (absl::Status s = wire::ValidateAddress(options.metrics_listen,
                                               "--metrics-listen", true);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          base::EnsureWritableDirectory(options.state_dir, "--state-dir");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<wire::TransportSecurity> security =
      wire::LoadTransportSecurity(options.tls, wire::TlsRole::kServer);
  if (!security.ok()) return security.status();
  if (!identity.empty() && !security->mutual()) {
    return absl::InvalidArgumentError(absl::StrCat(
        identity_flag,
        " needs mutual TLS (--tls-cert, --tls-key and --tls-ca): without "
        "client certificates there is no identity to check"));
  }
  absl::StatusOr<metrics::WebConfig> web = metrics::ReadWebConfig(
      options.metrics_web_config, "--metrics-web-config");
  if (!web.ok()) return web.status();
  absl::StatusOr<std::string> fleet_token =
      wire::LoadBearerToken(options.fleet_token_file, "--fleet-token-file");
  if (!fleet_token.ok()) return fleet_token.status();
  std::unique_ptr<ServerFrame> frame(new ServerFrame(std::move(options)));
  frame->security_ = std::move(*security);
  frame->metrics_web_ = std::move(*web);
  frame->fleet_token_ = std::move(*fleet_token);
  return frame;
}

absl::Status ServerFrame::StartMetrics(const std::string& component) {
  if (options_.metrics_listen.empty() || metrics_ != nullptr) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<metrics::MetricsExposer>> m =
      metrics::MetricsExposer::Start(options_.metrics_listen, component,
                                     metrics_web_);
  if (!m.ok()) return m.status();
  metrics_ = std::move(*m);
  return absl::OkStatus();
}

prometheus::Registry* ServerFrame::registry() {
  return metrics_ == nullptr ? nullptr : &metrics_->registry();
}

int ServerFrame::metrics_port() const {
  return metrics_ == nullptr ? 0 : metrics_->port();
}

absl::Status ServerFrame::StartServing(
    const std::vector<grpc::Service*>& services) {
  if (server_ != nullptr) {
    return absl::FailedPreconditionError("the server is serving already");
  }
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = wire::StartServer(
      options_.listen, "--listen", services, &port_, security_);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return absl::OkStatus();
}

void ServerFrame::StopAdvertising() {
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
}

void ServerFrame::StopServing() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  server_.reset();
}

void ServerFrame::StopMetrics() { metrics_.reset(); }

}  // namespace petra::server
