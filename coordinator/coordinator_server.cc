#include "coordinator/coordinator_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "coordinator/access_control.h"
#include "coordinator/audit_log.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/fleet_members.h"
#include "coordinator/fleet_service.h"
#include "coordinator/job_manager.h"
#include "coordinator/replica_rendezvous.h"
#include "coordinator/stage_discovery.h"
#include "coordinator/stage_list.h"
#include "services/base/host_port.h"
#include "services/base/paths.h"
#include "services/data/dataset.h"
#include "services/wire/bearer_token.h"
#include "services/wire/grpc_defaults.h"

namespace petra::coordinator {

CoordinatorServer::CoordinatorServer(Options options,
                                     std::unique_ptr<server::ServerFrame> frame,
                                     std::vector<std::string> stages,
                                     std::unique_ptr<AccessControl> access,
                                     std::unique_ptr<AuditLog> audit)
    : frame_(std::move(frame)),
      options_(std::move(options)),
      stages_(std::move(stages)),
      access_(std::move(access)),
      audit_(std::move(audit)) {}
CoordinatorServer::~CoordinatorServer() { GracefulStop(); }

bool CoordinatorServer::requires_token() const { return !access_->open(); }
int CoordinatorServer::user_count() const { return access_->user_count(); }
const std::string& CoordinatorServer::audit_log_path() const {
  return audit_->path();
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Create(
    Options options) {
  if (!options.stage_dns.empty()) {
    if (absl::Status s =
            base::SplitHostPort(options.stage_dns, "--stage-dns").status();
        !s.ok()) {
      return s;
    }
  }
  if (options.recovery_timeout_seconds < 0 ||
      options.recovery_timeout_seconds > 7 * 24 * 3600) {
    return absl::InvalidArgumentError(
        absl::StrCat("--recovery-timeout = ", options.recovery_timeout_seconds,
                     ": must be between 0 and 604800 seconds (a week)"));
  }
  if (options.max_recoveries < 0 || options.max_recoveries > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-recoveries = ", options.max_recoveries,
                     ": must be between 0 and 1000"));
  }
  for (const auto& [flag, value] :
       {std::pair{"--max-jobs-per-user", options.max_jobs_per_user},
        std::pair{"--max-servers-per-user", options.max_servers_per_user}}) {
    if (value < 0 || value > 100000) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " = ", value, ": must be between 0 (no limit) and 100000"));
    }
  }
  for (const auto& [flag, value] :
       {std::pair{"--host-link-bandwidth", options.host_link_bandwidth},
        std::pair{"--cross-host-bandwidth", options.cross_host_bandwidth}}) {
    if (!(value > 0) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " = ", value, ": must be a number of bytes/s above 0"));
    }
  }
  if (options.member_lease_seconds < 1 || options.member_lease_seconds > 3600) {
    return absl::InvalidArgumentError(
        absl::StrCat("--member-lease = ", options.member_lease_seconds,
                     ": must be between 1 and 3600 seconds"));
  }
  absl::StatusOr<std::vector<std::string>> stages =
      options.stages.empty() ? std::vector<std::string>()
                             : ExpandStageList(options.stages);
  if (!stages.ok()) return stages.status();
  if (!options.replica_store.empty()) {
    if (absl::Status s = wire::ValidateAddress(options.replica_store,
                                               "--replica-store", true);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          base::CheckReadableDirectory(options.data_root, "--data-root");
      !s.ok()) {
    return s;
  }
  if (options.data_workers < 0 ||
      options.data_workers > data::kMaxDataWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-workers: ", options.data_workers, " is not in [0, ",
        data::kMaxDataWorkers, "] (0: one per core)"));
  }
  // The state directory made (the audit log goes there), TLS and the
  // fleet token loaded.
  absl::StatusOr<std::unique_ptr<server::ServerFrame>> frame =
      server::ServerFrame::Create(options, "--stage-identity",
                                  options.stage_identity);
  if (!frame.ok()) return frame.status();
  if (!options.auth_token_file.empty() && !options.users_file.empty()) {
    return absl::InvalidArgumentError(
        "--auth-token-file and --users-file: give one (a users file can "
        "hold that token as an admin's)");
  }
  absl::StatusOr<AccessControl> access = AccessControl::Open();
  if (!options.users_file.empty()) {
    access = AccessControl::FromFile(options.users_file);
  } else {
    absl::StatusOr<std::string> token =
        wire::LoadBearerToken(options.auth_token_file, "--auth-token-file");
    if (!token.ok()) return token.status();
    access = AccessControl::SingleToken(*token);
  }
  if (!access.ok()) return access.status();
  absl::StatusOr<std::unique_ptr<AuditLog>> audit = AuditLog::Open(
      options.audit_log.empty() ? options.state_dir + "/audit.log"
                                : options.audit_log);
  if (!audit.ok()) return audit.status();
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(
      std::move(options), std::move(*frame), std::move(*stages),
      std::make_unique<AccessControl>(std::move(*access)), std::move(*audit)));
}

absl::Status CoordinatorServer::Start() {
  if (frame_->serving()) {
    return absl::FailedPreconditionError("coordinator already started");
  }
  if (absl::Status s = frame_->StartMetrics("coordinator"); !s.ok()) return s;
  job_metrics_ = std::make_unique<CoordinatorMetrics>(frame_->registry());
  members_ = std::make_unique<FleetMembers>(
      stages_, std::chrono::seconds(options_.member_lease_seconds));
  if (!options_.stage_dns.empty()) {
    absl::StatusOr<std::unique_ptr<StageDiscovery>> discovery =
        StageDiscovery::Create(options_.stage_dns, members_.get());
    if (!discovery.ok()) return discovery.status();
    discovery_ = std::move(*discovery);
    // Before serving: its first round runs now.
    discovery_->Start(std::chrono::milliseconds(
        std::max<int64_t>(1, options_.member_lease_seconds) * 1000 / 3));
  }
  RunnerEnvironment env;
  env.fleet = members_.get();
  env.data_root = options_.data_root;
  env.data_workers = static_cast<int>(options_.data_workers);
  env.state_dir = options_.state_dir;
  env.cache_dir =
      options_.cache_tokenizers
          ? (std::filesystem::path(options_.state_dir) / "cache").string()
          : "";
  env.metrics = job_metrics_.get();
  env.security = frame_->security();
  env.fleet_token = frame_->fleet_token();
  env.recovery_timeout =
      std::chrono::seconds(options_.recovery_timeout_seconds);
  env.max_recoveries = static_cast<uint32_t>(options_.max_recoveries);
  env.host_link_bandwidth = options_.host_link_bandwidth;
  env.cross_host_bandwidth = options_.cross_host_bandwidth;
  replica_store_ = ReplicaRendezvous::ForFleet(options_.replica_store,
                                               options_.listen, stages_);
  env.replica_store = replica_store_.get();
  UserLimits limits;
  limits.running_jobs = static_cast<int>(options_.max_jobs_per_user);
  limits.servers = static_cast<int>(options_.max_servers_per_user);
  jobs_ = std::make_unique<JobManager>(std::move(env), limits);
  service_ = std::make_unique<CoordinatorServiceImpl>(
      jobs_.get(), job_metrics_.get(), access_.get(), audit_.get());
  fleet_service_ = std::make_unique<FleetServiceImpl>(
      members_.get(), frame_->fleet_token(), options_.stage_identity);
  return frame_->StartServing({service_.get(), fleet_service_.get()});
}

void CoordinatorServer::GracefulStop() {
  if (!frame_->serving()) return;
  frame_->StopAdvertising();
  // Jobs first: the running one releases its stages, and every watch stream
  // gets the job's last event and ends, so the server stops promptly.
  jobs_->Stop();
  frame_->StopServing();
  service_.reset();
  fleet_service_.reset();
  jobs_.reset();
  discovery_.reset();
  job_metrics_.reset();
  frame_->StopMetrics();
}

}  // namespace petra::coordinator
