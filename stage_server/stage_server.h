// The stage server: one per device, long-running, idle until the
// coordinator assigns it a layer range. A thin gRPC front end; the stage
// engine (services/engine) does the work.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/metrics/web_config.h"
#include "services/wire/transport_security.h"
#include "stage_server/receive_budget.h"

namespace grpc {
class Server;
}  // namespace grpc
namespace petra::metrics {
class MetricsExposer;
}  // namespace petra::metrics
namespace petra::link {
class ChannelServices;
}  // namespace petra::link

namespace petra::stage_server {

class FleetRegistration;
class StageServiceImpl;
class StageHost;
class StageMetrics;

class StageServer {
 public:
  struct Options {
    // gRPC address (host:port; port 0 picks a free port).
    std::string listen = "0.0.0.0:50051";
    // Prometheus /metrics address; empty disables it.
    std::string metrics_listen = "0.0.0.0:9451";
    // /metrics over TLS and with basic auth (metrics/web_config.h).
    std::string metrics_web_config;
    // Device the stage runs on: cpu, cuda, cuda:N.
    std::string device = "cpu";
    // Threads for the stage's torch work (intra-op).
    int64_t threads = 2;
    // Memory a stage may use, in bytes; 0 = what the device has (the
    // machine's or its cgroup's, a GPU's). A job whose estimated need
    // exceeds it is refused at Assign.
    int64_t memory_limit_bytes = 0;
    // What the data streams may hold of micro-batches not yet whole: one
    // stream, and all of them (and the bulk channel's inbox) together
    // (receive_budget.h).
    int64_t max_stream_bytes = kDefaultMaxStreamBytes;
    int64_t max_receive_bytes = kDefaultMaxReceiveBytes;
    // Where checkpoints are written; created when missing.
    std::string state_dir = "/var/lib/petra/stage";
    // On SIGTERM, how long passes already started may take to finish.
    int64_t drain_seconds = 30;
    // TLS for the server and for the streams to its neighbours; empty =
    // plaintext. With a CA, peers must present a certificate it signed.
    wire::TlsOptions tls;
    // With mutual TLS: the identity (certificate CN or DNS name) whose
    // control calls (Assign, Start, Checkpoint, ReadCheckpoint,
    // RestoreCheckpoint, Release) are accepted; empty = any verified peer.
    std::string coordinator_identity;
    // A file holding the fleet token: control calls must carry it as
    // `authorization: Bearer <token>` (the coordinator's
    // --fleet-token-file); empty = no token needed.
    std::string fleet_token_file;
    // The coordinator to join (its --listen host:port): the server
    // registers and renews its lease until it stops; empty = the
    // coordinator lists it in --stages.
    std::string coordinator;
    // HOST or HOST:PORT the fleet reaches this server at (a StatefulSet
    // pod's DNS name); empty = the host of `listen`, or for a wildcard this
    // machine's address on the route to the coordinator.
    std::string advertise_address;
  };

  // Checks the options (addresses, device, threads, state dir, TLS files)
  // without binding anything.
  static absl::StatusOr<std::unique_ptr<StageServer>> Create(Options options);
  ~StageServer();

  // Binds and starts serving.
  absl::Status Start();
  // Refuses new work, lets the passes already started finish (up to
  // drain_seconds), releases the job; then stops serving and returns.
  void GracefulStop();

  // Ports actually bound (after Start).
  int port() const { return port_; }
  int metrics_port() const;
  const Options& options() const { return options_; }
  // The TLS settings as loaded by Create.
  const wire::TransportSecurity& security() const { return security_; }

 private:
  StageServer(Options options, wire::TransportSecurity security);
  Options options_;
  metrics::WebConfig metrics_web_;
  std::string fleet_token_;
  wire::TransportSecurity security_;
  // Before the members that point into its registry, so that it is
  // destroyed after them also when Start failed half-way (GracefulStop then
  // has nothing to stop and leaves the order to the destructor).
  std::unique_ptr<metrics::MetricsExposer> metrics_;
  std::unique_ptr<StageMetrics> stage_metrics_;
  std::unique_ptr<ReceiveBudget> budget_;
  std::unique_ptr<StageHost> host_;
  std::unique_ptr<StageServiceImpl> service_;
  // What the data channels into this server need served.
  std::unique_ptr<link::ChannelServices> channels_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<FleetRegistration> registration_;
  int port_ = 0;
};

}  // namespace petra::stage_server
