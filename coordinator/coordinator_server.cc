#include "coordinator/coordinator_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/job_manager.h"
#include "coordinator/stage_list.h"
#include "services/cli/paths.h"
#include "services/metrics/metrics_exposer.h"
#include "services/wire/grpc_defaults.h"

namespace petra::coordinator {

CoordinatorServer::CoordinatorServer(Options options,
                                     std::vector<std::string> stages)
    : options_(std::move(options)), stages_(std::move(stages)) {}
CoordinatorServer::~CoordinatorServer() { GracefulStop(); }

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Create(
    Options options) {
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
  absl::StatusOr<std::vector<std::string>> stages =
      ExpandStageList(options.stages);
  if (!stages.ok()) return stages.status();
  if (absl::Status s =
          cli::CheckReadableDirectory(options.data_root, "--data-root");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          cli::EnsureWritableDirectory(options.state_dir, "--state-dir");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<CoordinatorServer>(
      new CoordinatorServer(std::move(options), std::move(*stages)));
}

absl::Status CoordinatorServer::Start() {
  if (server_ != nullptr) {
    return absl::FailedPreconditionError("coordinator already started");
  }
  if (!options_.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsExposer>> m =
        metrics::MetricsExposer::Start(options_.metrics_listen, "coordinator");
    if (!m.ok()) return m.status();
    metrics_ = std::move(*m);
  }
  job_metrics_ = std::make_unique<CoordinatorMetrics>(
      metrics_ != nullptr ? &metrics_->registry() : nullptr);
  jobs_ = std::make_unique<JobManager>(RunnerEnvironment{
      stages_, options_.data_root, options_.state_dir, job_metrics_.get()});
  service_ =
      std::make_unique<CoordinatorServiceImpl>(jobs_.get(), job_metrics_.get());
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      wire::StartServer(options_.listen, "--listen", {service_.get()}, &port_);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return absl::OkStatus();
}

void CoordinatorServer::GracefulStop() {
  if (server_ == nullptr) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  // Jobs first: the running one releases its stages, and every watch stream
  // gets the job's last event and ends, so the server stops promptly.
  jobs_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  server_.reset();
  service_.reset();
  jobs_.reset();
  job_metrics_.reset();
  metrics_.reset();
}

int CoordinatorServer::metrics_port() const {
  return metrics_ == nullptr ? 0 : metrics_->port();
}

}  // namespace petra::coordinator
