#include "services/server/frame_flags.h"

#include "services/metrics/web_config.h"
#include "services/wire/tls_flags.h"

namespace petra::server {

void AddFrameFlags(base::FlagSet& flags, FrameOptions* options,
                   const FrameFlagHelp& help) {
  flags.AddString("listen", &options->listen,
                  "gRPC address" +
                      (help.callers.empty() ? "" : " " + help.callers) +
                      ", host:port (port 0 picks a free port)");
  flags.AddString("metrics-listen", &options->metrics_listen,
                  "Prometheus /metrics address, host:port; empty disables");
  flags.AddString("metrics-web-config", &options->metrics_web_config,
                  metrics::kWebConfigHelp);
  flags.AddString("state-dir", &options->state_dir,
                  "directory for " + help.state + " (created when missing)");
  wire::AddServerTlsFlags(flags, &options->tls, help.tls_peers);
  flags.AddString(
      "fleet-token-file", &options->fleet_token_file,
      "file holding the fleet token: " + help.fleet_token + "; empty = none");
}

}  // namespace petra::server
