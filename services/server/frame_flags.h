// The flags of the options every server has (server_frame.h), declared
// once for both mains; each server says in its help what they mean there.
#pragma once

#include <string>

#include "services/base/flag_set.h"
#include "services/server/server_frame.h"

namespace petra::server {

struct FrameFlagHelp {
  // Who calls --listen, after "gRPC address" ("for clients"; empty: none).
  std::string callers;
  // What --state-dir holds ("checkpoints").
  std::string state;
  // Whom the server also connects to with the TLS files ("the stage
  // servers").
  std::string tls_peers;
  // What --fleet-token-file's token does on this server.
  std::string fleet_token;
};

// --listen, --metrics-listen, --metrics-web-config, --state-dir, the TLS
// flags and --fleet-token-file, into `options`.
void AddFrameFlags(base::FlagSet& flags, FrameOptions* options,
                   const FrameFlagHelp& help);

}  // namespace petra::server
