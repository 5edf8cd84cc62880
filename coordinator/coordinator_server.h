// The coordinator: accepts jobs from clients and drives the fleet of stage
// servers. A thin gRPC front end over the job manager.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/job/job_spec_defaults.h"
#include "services/server/server_frame.h"
#include "services/sim/placement.h"

namespace petra::coordinator {

class AccessControl;
class AuditLog;
class CoordinatorServiceImpl;
class FleetMembers;
class FleetServiceImpl;
class JobManager;
class CoordinatorMetrics;
class ReplicaRendezvous;
class StageDiscovery;

class CoordinatorServer {
 public:
  // Where it listens (for clients), /metrics, TLS (for clients and the
  // calls to the stages), the fleet token (sent on every call to the
  // stages) and the state directory (job records and checkpoints) are
  // every server's (server_frame.h); the rest is the coordinator's own.
  struct Options : server::FrameOptions {
    Options() {
      listen = "0.0.0.0:50050";
      metrics_listen = "0.0.0.0:9450";
      state_dir = "/var/lib/petra/coordinator";
    }
    // The --stages flag value: host:port list or {A..B} pattern; empty: the
    // fleet is the servers that register (petra-stage-server --coordinator).
    std::string stages;
    // With mutual TLS: the identity (certificate CN or DNS name) a stage
    // server must present to register; empty = any verified peer.
    std::string stage_identity;
    // How long a registered stage server stays in the fleet without
    // renewing (they renew every third of it).
    int64_t member_lease_seconds = 15;
    // NAME:PORT resolved every third of the lease (a Kubernetes headless
    // service): each address found is a member while the name gives it.
    // Empty: none.
    std::string stage_dns;
    // Root every dataset path is resolved under.
    std::string data_root = job::kDefaultDataRoot;
    // Threads decoding a streamed dataset's images (image folders); 0: one
    // per core this process may use.
    int64_t data_workers = 0;
    // A tokenizer a job trains is kept under <state_dir>/cache for the next
    // job on the same text; false (a state_dir removed after the run):
    // nothing is kept, and nothing says it would be.
    bool cache_tokenizers = true;
    // File holding the bearer token every CoordinatorService call must
    // carry, one admin's ("admin"); empty = no token needed.
    std::string auth_token_file;
    // Users, their tokens and roles (a text proto of petra.v1.UsersConfig);
    // instead of auth_token_file.
    std::string users_file;
    // The audit log (JSON lines, appended); empty = <state_dir>/audit.log.
    std::string audit_log;
    // How long a job that lost a stage server waits for it or a spare; 0
    // fails such a job at once.
    int64_t recovery_timeout_seconds = 120;
    // Recoveries in a row without a finished epoch before a job fails.
    int64_t max_recoveries = 3;
    // Per user (a job's owner), jobs running at once and stage servers
    // they hold; 0: no limit. Jobs past a limit wait in the queue.
    int64_t max_jobs_per_user = 0;
    int64_t max_servers_per_user = 0;
    // What placement assumes of a link inside a host and between hosts,
    // bytes/s each direction (weighed only against measured block times).
    double host_link_bandwidth = sim::PlacementProblem().same_host_bandwidth;
    double cross_host_bandwidth = sim::PlacementProblem().cross_host_bandwidth;
    // host:port the stage servers reach this coordinator's replica store
    // at (jobs with replicas meet there; port 0: an ephemeral one); empty:
    // the host of `listen` (loopback for a wildcard) and port 0.
    std::string replica_store;
  };

  // Checks the options (addresses, stage list, directories) without binding.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Create(
      Options options);
  ~CoordinatorServer();

  absl::Status Start();
  void GracefulStop();

  int port() const { return frame_->port(); }
  int metrics_port() const { return frame_->metrics_port(); }
  // The --stages list (registered servers come and go).
  const std::vector<std::string>& stage_addresses() const { return stages_; }
  // The TLS settings as loaded by Create (the certificate is the identity
  // the stages' --coordinator-identity names; with a CA, clients must
  // present a certificate it signed), and whether a token is required.
  const wire::TransportSecurity& security() const { return frame_->security(); }
  bool requires_token() const;
  const std::string& fleet_token() const { return frame_->fleet_token(); }
  int64_t member_lease_seconds() const { return options_.member_lease_seconds; }
  const std::string& stage_dns() const { return options_.stage_dns; }
  // Users of --users-file (1 for --auth-token-file, 0 when open).
  int user_count() const;
  const std::string& audit_log_path() const;

 private:
  CoordinatorServer(Options options, std::unique_ptr<server::ServerFrame> frame,
                    std::vector<std::string> stages,
                    std::unique_ptr<AccessControl> access,
                    std::unique_ptr<AuditLog> audit);
  // First: its /metrics registry outlives the members that point into it,
  // also when Start failed half-way.
  std::unique_ptr<server::ServerFrame> frame_;
  Options options_;
  std::vector<std::string> stages_;
  std::unique_ptr<AccessControl> access_;
  // Outlives the service that appends to it.
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<CoordinatorMetrics> job_metrics_;
  std::unique_ptr<ReplicaRendezvous> replica_store_;
  std::unique_ptr<FleetMembers> members_;
  // Registers into members_: stopped and destroyed before it.
  std::unique_ptr<StageDiscovery> discovery_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<CoordinatorServiceImpl> service_;
  std::unique_ptr<FleetServiceImpl> fleet_service_;
};

}  // namespace petra::coordinator
