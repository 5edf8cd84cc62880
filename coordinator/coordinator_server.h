// The coordinator: accepts jobs from clients and drives the fleet of stage
// servers. A thin gRPC front end over the job manager.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/job/job_spec_defaults.h"

namespace grpc {
class Server;
}  // namespace grpc
namespace petra::metrics {
class MetricsExposer;
}  // namespace petra::metrics

namespace petra::coordinator {

class CoordinatorServiceImpl;
class JobManager;
class CoordinatorMetrics;

class CoordinatorServer {
 public:
  struct Options {
    // gRPC address for clients (host:port; port 0 picks a free port).
    std::string listen = "0.0.0.0:50050";
    // Prometheus /metrics address; empty disables it.
    std::string metrics_listen = "0.0.0.0:9450";
    // The --stages flag value: host:port list or {A..B} pattern.
    std::string stages;
    // Root every dataset path is resolved under.
    std::string data_root = job::kDefaultDataRoot;
    // Job records and checkpoints; created when missing.
    std::string state_dir = "/var/lib/petra/coordinator";
  };

  // Checks the options (addresses, stage list, directories) without binding.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Create(
      Options options);
  ~CoordinatorServer();

  absl::Status Start();
  void GracefulStop();

  int port() const { return port_; }
  int metrics_port() const;
  const std::vector<std::string>& stage_addresses() const { return stages_; }

 private:
  CoordinatorServer(Options options, std::vector<std::string> stages);
  Options options_;
  std::vector<std::string> stages_;
  std::unique_ptr<CoordinatorMetrics> job_metrics_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<CoordinatorServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<metrics::MetricsExposer> metrics_;
  int port_ = 0;
};

}  // namespace petra::coordinator
