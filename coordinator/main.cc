// petra-coordinator: maps flags to CoordinatorServer::Options and runs the
// server until SIGINT or SIGTERM.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_server.h"
#include "services/base/event_log.h"
#include "services/base/flag_set.h"
#include "services/base/server_main.h"
#include "services/server/frame_flags.h"

namespace {

// What the started coordinator says of itself, after the warnings an
// operator must see first (no token, plaintext tokens, an open fleet).
petra::base::ServerAnnouncement Announce(
    const char* argv0, const petra::coordinator::CoordinatorServer& server,
    const std::string& stage_identity) {
  if (server.requires_token() && !server.security().enabled()) {
    std::cerr << argv0
              << ": warning: tokens without --tls-cert: clients send "
                 "them in plaintext\n";
  }
  if (!server.requires_token()) {
    std::cerr << argv0
              << ": warning: no --auth-token-file or --users-file: "
                 "anyone who reaches --listen may submit, cancel and "
                 "export any job\n";
  }
  const std::string stages = absl::StrCat(server.stage_addresses().size());
  if (server.fleet_token().empty() && stage_identity.empty()) {
    std::cerr << argv0
              << ": warning: no --fleet-token-file or --stage-identity "
                 "(mutual TLS): any server that reaches --listen may "
                 "join the fleet and be sent jobs' data\n";
  }
  petra::base::ServerAnnouncement a;
  a.port = server.port();
  a.listening = absl::StrCat(
      stages, " stage servers from --stages, ",
      server.stage_dns().empty()
          ? ""
          : absl::StrCat("those --stage-dns ", server.stage_dns(), " gives, "),
      "more may register with ", server.member_lease_seconds(), " s leases");
  a.transport =
      server.security().Describe() +
      (server.requires_token()
           ? absl::StrCat(", bearer token required (", server.user_count(),
                          " user", server.user_count() == 1 ? "" : "s", ")")
           : "");
  a.metrics_port = server.metrics_port();
  a.log_fields = {{"stage_servers", stages},
                  {"transport", server.security().Describe()},
                  {"token", server.requires_token() ? "required" : "none"},
                  {"users", absl::StrCat(server.user_count())},
                  {"audit_log", server.audit_log_path()}};
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  petra::base::InitServerProcess(argv[0]);
  petra::coordinator::CoordinatorServer::Options options;
  petra::base::FlagSet flags(
      "petra-coordinator [--stages ADDRESSES] [flags]",
      "PETRA coordinator: accepts training jobs from clients (petra submit),\n"
      "plans each job's partition over the stage servers, feeds the data and\n"
      "reports progress. The fleet is the --stages list and the stage\n"
      "servers that register (petra-stage-server --coordinator ADDRESS); "
      "either\n"
      "may be empty. Stops cleanly on SIGINT or SIGTERM.");
  petra::server::FrameFlagHelp frame_help;
  frame_help.callers = "for clients";
  frame_help.state = "job records and checkpoints";
  frame_help.tls_peers = "the stage servers";
  frame_help.fleet_token =
      "the stage servers' (their --fleet-token-file), sent on every call to "
      "them";
  petra::server::AddFrameFlags(flags, &options, frame_help);
  flags.AddString("stages", &options.stages,
                  "stage servers: host:port,... or a pattern such as "
                  "petra-stage-{0..3}.petra-stage:50051; empty = only the "
                  "servers that register");
  flags.AddString("stage-dns", &options.stage_dns,
                  "NAME:PORT resolved every third of --member-lease (a "
                  "Kubernetes headless service, one address per pod): each "
                  "address found joins the fleet while the name gives it; "
                  "empty = none");
  flags.AddInt("member-lease", &options.member_lease_seconds,
               "seconds a registered stage server stays in the fleet "
               "without renewing (it renews every third of this); one that "
               "lapses is lost to placement and its job recovers");
  flags.AddString("data-root", &options.data_root,
                  "directory every dataset path is resolved under");
  flags.AddInt("data-workers", &options.data_workers,
               "threads decoding image-folder datasets ahead of training; 0 "
               "= one per core this process may use (its CPU quota too)");
  flags.AddString("auth-token-file", &options.auth_token_file,
                  "file holding the bearer token every client call must "
                  "carry (authorization: Bearer TOKEN), one admin's; empty "
                  "= no token; health checks need none");
  flags.AddString("users-file", &options.users_file,
                  "users, their tokens and roles (admin, member, viewer): a "
                  "text proto of petra.v1.UsersConfig (docs/DEPLOY.md); "
                  "instead of --auth-token-file");
  flags.AddString("stage-identity", &options.stage_identity,
                  "with mutual TLS, let only a certificate with this CN or "
                  "DNS name register as a stage server (petra-stage-server "
                  "--coordinator); empty accepts any certificate of "
                  "--tls-ca");
  flags.AddString("audit-log", &options.audit_log,
                  "file every control call is appended to as a JSON line "
                  "(who, what, when, the result); empty = "
                  "<state-dir>/audit.log");
  flags.AddInt("recovery-timeout", &options.recovery_timeout_seconds,
               "seconds a running job that lost a stage server waits for it "
               "(or an idle spare listed in --stages) before it fails; 0 "
               "fails at once");
  flags.AddInt("max-recoveries", &options.max_recoveries,
               "recoveries in a row without a finished epoch before a job "
               "fails");
  flags.AddInt("max-jobs-per-user", &options.max_jobs_per_user,
               "jobs of one user running at once (0: no limit); jobs run "
               "at once on disjoint stage servers, and one past the limit "
               "waits in the queue");
  flags.AddInt("max-servers-per-user", &options.max_servers_per_user,
               "stage servers one user's running jobs hold at once (0: no "
               "limit); a job needing more is refused at submit");
  flags.AddDouble("host-link-bandwidth", &options.host_link_bandwidth,
                  "placement: bytes/s each way between stage servers on one "
                  "host (weighed against block times with "
                  "--partition-cost measured)");
  flags.AddDouble("cross-host-bandwidth", &options.cross_host_bandwidth,
                  "placement: bytes/s each way between stage servers on "
                  "different hosts");
  flags.AddString("replica-store", &options.replica_store,
                  "host:port the stage servers reach this coordinator's "
                  "c10d store at, where the copies of a job with replicas "
                  "meet (port 0 picks one); empty = the host of --listen "
                  "(loopback for 0.0.0.0) and a free port. Unauthenticated: "
                  "keep it on the fleet's network (docs/DEPLOY.md)");
  if (int rc = petra::base::ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  petra::base::InitEventLog(argv[0]);

  return petra::base::ServeUntilSignal(
      argv[0], "petra-coordinator",
      petra::coordinator::CoordinatorServer::Create(options),
      [&](petra::coordinator::CoordinatorServer& server) {
        return Announce(argv[0], server, options.stage_identity);
      });
}
