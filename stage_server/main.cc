// petra-stage-server: maps flags to StageServer::Options and runs the server
// until SIGINT or SIGTERM.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "services/base/event_log.h"
#include "services/base/flag_set.h"
#include "services/base/server_main.h"
#include "services/server/frame_flags.h"
#include "stage_server/stage_server.h"

int main(int argc, char** argv) {
  petra::base::InitServerProcess(argv[0]);
  petra::stage_server::StageServer::Options options;
  petra::base::FlagSet flags(
      "petra-stage-server [flags]",
      "Long-running PETRA stage server: one per device. Idle until a\n"
      "coordinator assigns it a layer range of a job; then it trains that\n"
      "range, streaming activations to the next stage and gradients to the\n"
      "previous one. On SIGINT or SIGTERM it refuses new work, lets the\n"
      "running pass finish (--drain-seconds) and exits.");
  petra::server::FrameFlagHelp frame_help;
  frame_help.state = "checkpoints";
  frame_help.tls_peers = "the neighbour stages";
  frame_help.fleet_token =
      "control calls (assign, start, checkpoint, release) must carry it, as "
      "the coordinator's --fleet-token-file sends it";
  petra::server::AddFrameFlags(flags, &options, frame_help);
  flags.AddString("device", &options.device,
                  "device the stage runs on: cpu, cuda or cuda:N");
  flags.AddInt("memory-limit-bytes", &options.memory_limit_bytes,
               "memory a stage may use; a job whose estimated need is larger "
               "is refused when assigned (0: the device's own, the machine's "
               "or its cgroup's limit on cpu)");
  flags.AddInt("threads", &options.threads, "threads for the stage's compute");
  flags.AddInt("max-stream-bytes", &options.max_stream_bytes,
               "most bytes one data stream may hold of a micro-batch that is "
               "not whole yet; past it the stream ends RESOURCE_EXHAUSTED");
  flags.AddInt("max-receive-bytes", &options.max_receive_bytes,
               "most bytes all data streams together may hold of "
               "micro-batches not whole yet, and the bulk channel of payloads "
               "waiting for their message");
  flags.AddInt("drain-seconds", &options.drain_seconds,
               "on SIGTERM, seconds the passes already started may take to "
               "finish");
  flags.AddString("coordinator-identity", &options.coordinator_identity,
                  "with mutual TLS, accept control calls (assign, start, "
                  "checkpoint, release) only from a certificate with this CN "
                  "or DNS name; empty accepts any certificate of --tls-ca");
  flags.AddString("coordinator", &options.coordinator,
                  "join this coordinator's fleet (its --listen host:port): "
                  "register, renew the lease until stopped, leave on SIGTERM; "
                  "empty = the coordinator lists this server in --stages");
  flags.AddString("advertise-address", &options.advertise_address,
                  "with --coordinator: HOST or HOST:PORT the coordinator and "
                  "the other stages reach this server at (e.g. a "
                  "StatefulSet pod's DNS name); empty = the host of --listen, "
                  "or for 0.0.0.0 this machine's address toward the "
                  "coordinator");
  bool insecure = false;
  flags.AddBool("insecure", &insecure,
                "run with no control lock: without --fleet-token-file or "
                "--coordinator-identity the server refuses to start unless "
                "given this (a trusted network, a test on loopback)");
  if (int rc = petra::base::ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  petra::base::InitEventLog(argv[0]);

  auto created = petra::stage_server::StageServer::Create(options);
  // Checked after the flags' own errors, which say more.
  if (created.ok() && !insecure && options.coordinator_identity.empty() &&
      options.fleet_token_file.empty()) {
    // A server anyone can Assign and Release is a job anyone can stop (a
    // new user's anonymous Release put a job into recovery): refuse rather
    // than warn.
    std::cerr << argv[0]
              << ": no --fleet-token-file or --coordinator-identity: anyone "
                 "who reaches --listen could assign, start and release this "
                 "server's work. Give the fleet token (the coordinator's "
                 "--fleet-token-file) or mutual TLS with "
                 "--coordinator-identity (docs/DEPLOY.md, \"Who may control "
                 "a stage server\"), or --insecure to run open on a trusted "
                 "network\n";
    return 2;
  }
  return petra::base::ServeUntilSignal(
      argv[0], "petra-stage-server", std::move(created),
      [&](petra::stage_server::StageServer& server) {
        if (insecure && options.coordinator_identity.empty() &&
            options.fleet_token_file.empty()) {
          // Said where an operator looks first.
          std::cerr << argv[0]
                    << ": warning: --insecure: no control lock; anyone who "
                       "reaches --listen may assign, start and release this "
                       "server's work\n";
        }
        petra::base::ServerAnnouncement a;
        a.port = server.port();
        a.listening = "device " + options.device;
        a.transport = server.security().Describe() +
                      (options.coordinator_identity.empty()
                           ? ""
                           : ", control calls only from \"" +
                                 options.coordinator_identity + "\"");
        a.metrics_port = server.metrics_port();
        if (!options.coordinator.empty()) {
          a.listening += ", joining the fleet of " + options.coordinator;
        }
        a.log_fields = {{"device", options.device},
                        {"transport", server.security().Describe()},
                        {"coordinator", options.coordinator}};
        return a;
      });
}
