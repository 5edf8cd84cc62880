// What every job's run is given by the coordinator: the fleet, the other
// jobs' claims, folders, metrics, how stages are reached and recovery's
// limits. Its own header so that JobRunner and FleetRunner both read it
// without including each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/fleet_members.h"
#include "coordinator/replica_rendezvous.h"
#include "coordinator/server_claims.h"
#include "coordinator/stage_client.h"
#include "services/wire/transport_security.h"

namespace petra::coordinator {

struct RunnerEnvironment {
  // The whole fleet (--stages and registered servers); never null. Asked
  // at each placement.
  FleetMembers* fleet = nullptr;
  // What the other running jobs hold: a job places itself on the rest and
  // claims what it chose. Null: the job is the only one (nothing claimed).
  ServerClaims* claims = nullptr;
  std::string data_root;
  int data_workers = 0;   // image-folder decode threads; 0: one per core
  std::string state_dir;  // the coordinator's
  std::string cache_dir;  // trained tokenizers kept for later jobs; "": none
  CoordinatorMetrics* metrics = nullptr;  // none when null
  // TLS of the calls to the stages: the coordinator's own certificate.
  wire::TransportSecurity security;
  // The stage servers' fleet token (--fleet-token-file), sent on every
  // call to them; empty: none.
  std::string fleet_token;
  // How stages are reached; gRPC with `security` when empty.
  StageConnector connect;
  // A running job that loses a stage server waits this long for it (or an
  // idle spare) to answer before it fails.
  std::chrono::seconds recovery_timeout{120};
  // Recoveries in a row without a finished epoch before the job fails: a
  // stage that crashes on every start must not loop forever.
  uint32_t max_recoveries = 3;
  // Placement's links (bytes/s each direction): CoordinatorServer::Options.
  double host_link_bandwidth = 0;
  double cross_host_bandwidth = 0;
  // Where jobs with replicas meet (CoordinatorServer::Options.replica_store);
  // such jobs are refused when null.
  ReplicaRendezvous* replica_store = nullptr;
};

// How `env` reaches a stage: its connector, or gRPC with its TLS and fleet
// token.
StageConnector ConnectorOf(const RunnerEnvironment& env);

}  // namespace petra::coordinator
