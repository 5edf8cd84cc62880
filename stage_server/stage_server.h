// The stage server: one per device, long-running, idle until the
// coordinator assigns it a layer range. A thin gRPC front end; the stage
// engine (services/engine) does the work.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/server/server_frame.h"
#include "stage_server/receive_budget.h"

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
  // Where it listens, /metrics, TLS, the fleet token and the state
  // directory (where checkpoints are written) are every server's
  // (server_frame.h); the rest is the stage server's own.
  struct Options : server::FrameOptions {
    Options() {
      listen = "0.0.0.0:50051";
      metrics_listen = "0.0.0.0:9451";
      state_dir = "/var/lib/petra/stage";
    }
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
    // On SIGTERM, how long passes already started may take to finish.
    int64_t drain_seconds = 30;
    // With mutual TLS: the identity (certificate CN or DNS name) whose
    // control calls (Assign, Start, Checkpoint, ReadCheckpoint,
    // RestoreCheckpoint, Release) are accepted; empty = any verified peer.
    std::string coordinator_identity;
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
  int port() const { return frame_->port(); }
  int metrics_port() const { return frame_->metrics_port(); }
  const Options& options() const { return options_; }
  // The TLS settings as loaded by Create (for the server and the streams
  // to its neighbours; with a CA, peers must present a certificate it
  // signed). The fleet token, when set, is what control calls must carry
  // as `authorization: Bearer <token>` (the coordinator's
  // --fleet-token-file).
  const wire::TransportSecurity& security() const { return frame_->security(); }

 private:
  StageServer(Options options, std::unique_ptr<server::ServerFrame> frame);
  // First: its /metrics registry outlives the members that point into it,
  // also when Start failed half-way.
  std::unique_ptr<server::ServerFrame> frame_;
  Options options_;
  std::unique_ptr<StageMetrics> stage_metrics_;
  std::unique_ptr<ReceiveBudget> budget_;
  std::unique_ptr<StageHost> host_;
  std::unique_ptr<StageServiceImpl> service_;
  // What the data channels into this server need served.
  std::unique_ptr<link::ChannelServices> channels_;
  std::unique_ptr<FleetRegistration> registration_;
};

}  // namespace petra::stage_server
