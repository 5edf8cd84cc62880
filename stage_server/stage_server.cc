#include "stage_server/stage_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "services/base/event_log.h"
#include "services/base/paths.h"
#include "services/link/bulk_inbox.h"
#include "services/link/channel_factory.h"
#include "services/link/endpoint.h"
#include "services/link/shared_ring.h"
#include "services/metrics/metrics_exposer.h"
#include "services/model/device_check.h"
#include "services/wire/bearer_token.h"
#include "services/wire/grpc_defaults.h"
#include "stage_server/fleet_registration.h"
#include "stage_server/receive_budget.h"
#include "stage_server/stage_host.h"
#include "stage_server/stage_metrics.h"
#include "stage_server/stage_service.h"

namespace petra::stage_server {

// More intra-op threads than this is a typo, not a machine.
constexpr int64_t kMaxThreads = 1024;

StageServer::StageServer(Options options, wire::TransportSecurity security)
    : options_(std::move(options)), security_(std::move(security)) {}
StageServer::~StageServer() { GracefulStop(); }

absl::StatusOr<std::unique_ptr<StageServer>> StageServer::Create(
    Options options) {
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
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads: ", options.threads, " is not in [1, ", kMaxThreads, "]"));
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, int64_t>{"--max-stream-bytes",
                                        options.max_stream_bytes},
        {"--max-receive-bytes", options.max_receive_bytes}}) {
    if (value < (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": ", value,
          " is less than 1 MiB (1048576): no micro-batch of a real job "
          "would pass"));
    }
  }
  if (options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory-limit-bytes: ", options.memory_limit_bytes,
                     " is negative (0 uses the device's own)"));
  }
  if (options.drain_seconds < 0 || options.drain_seconds > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--drain-seconds: ", options.drain_seconds, " is not in [0, 86400]"));
  }
  if (absl::Status s = model::CheckDeviceAvailable(options.device, "--device");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          base::EnsureWritableDirectory(options.state_dir, "--state-dir");
      !s.ok()) {
    return s;
  }
  if (!options.coordinator.empty()) {
    if (absl::Status s =
            wire::ValidateAddress(options.coordinator, "--coordinator", false);
        !s.ok()) {
      return s;
    }
  }
  if (!options.advertise_address.empty()) {
    if (options.coordinator.empty()) {
      return absl::InvalidArgumentError(
          "--advertise-address without --coordinator: only a server that "
          "registers advertises an address");
    }
    absl::StatusOr<std::string> a =
        AdvertisedAddress(options.advertise_address, "", 1, "");
    if (!a.ok()) return a.status();
  }
  absl::StatusOr<wire::TransportSecurity> security =
      wire::LoadTransportSecurity(options.tls, wire::TlsRole::kServer);
  if (!security.ok()) return security.status();
  if (!options.coordinator_identity.empty() && !security->mutual()) {
    return absl::InvalidArgumentError(
        "--coordinator-identity needs mutual TLS (--tls-cert, --tls-key and "
        "--tls-ca): without client certificates there is no identity to "
        "check");
  }
  absl::StatusOr<metrics::WebConfig> web = metrics::ReadWebConfig(
      options.metrics_web_config, "--metrics-web-config");
  if (!web.ok()) return web.status();
  std::unique_ptr<StageServer> server(
      new StageServer(std::move(options), std::move(*security)));
  absl::StatusOr<std::string> fleet_token = wire::LoadBearerToken(
      server->options_.fleet_token_file, "--fleet-token-file");
  if (!fleet_token.ok()) return fleet_token.status();
  server->metrics_web_ = std::move(*web);
  server->fleet_token_ = std::move(*fleet_token);
  return server;
}

absl::Status StageServer::Start() {
  if (server_ != nullptr) {
    return absl::FailedPreconditionError("stage server already started");
  }
  if (!options_.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsExposer>> m =
        metrics::MetricsExposer::Start(options_.metrics_listen, "stage_server",
                                       metrics_web_);
    if (!m.ok()) return m.status();
    metrics_ = std::move(*m);
  }
  stage_metrics_ = std::make_unique<StageMetrics>(
      metrics_ != nullptr ? &metrics_->registry() : nullptr);
  // Shared-memory rings left by servers of this host that died holding them
  // (their names; the memory goes with the last mapping).
  if (const int swept = link::SweepOrphanRings(); swept > 0) {
    PETRA_LOG_EVENT(kInfo, "orphan_rings_swept",
                    {"count", absl::StrCat(swept)});
  }
  host_ = std::make_unique<StageHost>(StageHost::Options{
      options_.device, static_cast<int>(options_.threads), options_.state_dir,
      stage_metrics_.get(), security_, options_.memory_limit_bytes});
  budget_ = std::make_unique<ReceiveBudget>(
      static_cast<uint64_t>(options_.max_receive_bytes),
      static_cast<uint64_t>(options_.max_stream_bytes));
  service_ = std::make_unique<StageServiceImpl>(
      host_.get(), options_.coordinator_identity, fleet_token_, budget_.get());
  link::BulkInbox::Global().SetMaxHeldBytes(
      static_cast<uint64_t>(options_.max_receive_bytes));
  channels_ = std::make_unique<link::ChannelServices>(
      [host = host_.get(),
       metrics = stage_metrics_.get()](const std::string& data_key) {
        absl::Status s = host->AdmitData(data_key);
        if (!s.ok()) {
          metrics->DataRefused("bulk", "unauthenticated");
          metrics->Error(s.code());
        }
        return s;
      });
  std::vector<grpc::Service*> services = channels_->services();
  services.insert(services.begin(), service_.get());
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = wire::StartServer(
      options_.listen, "--listen", services, &port_, security_);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  if (!options_.coordinator.empty()) {
    registration_ =
        std::make_unique<FleetRegistration>(FleetRegistration::Options{
            options_.coordinator, options_.advertise_address, options_.listen,
            port_, security_, fleet_token_});
  }
  return absl::OkStatus();
}

void StageServer::GracefulStop() {
  if (server_ == nullptr) return;
  // Readiness probes see the drain at once, so no new job is routed here.
  server_->GetHealthCheckService()->SetServingStatus(false);
  // Out of the fleet first: no placement picks a server that is going.
  if (registration_ != nullptr) registration_->Leave();
  host_->Drain(std::chrono::seconds(options_.drain_seconds));
  // Running calls get a few seconds to finish; then they are cancelled so a
  // stuck peer cannot hold the process up.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  server_.reset();
  service_.reset();
  host_.reset();
  stage_metrics_.reset();
  metrics_.reset();
}

int StageServer::metrics_port() const {
  return metrics_ == nullptr ? 0 : metrics_->port();
}

}  // namespace petra::stage_server
