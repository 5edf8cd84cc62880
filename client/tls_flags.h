// The client side of --tls-cert, --tls-key and --tls-ca, shared by every
// command that talks to a server (submit, watch, status, list, cancel,
// export, health).
#pragma once

#include "services/cli/flag_set.h"
#include "services/wire/transport_security.h"

namespace petra::client {

void AddClientTlsFlags(cli::FlagSet& flags, wire::TlsOptions* tls);

}  // namespace petra::client
