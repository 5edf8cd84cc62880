// --tls-cert, --tls-key and --tls-ca, declared once for every binary: the
// client side (submit, watch, status, list, cancel, export, health) and the
// server side (coordinator, stage server).
#pragma once

#include <string>

#include "services/base/flag_set.h"
#include "services/wire/transport_security.h"

namespace petra::wire {

void AddClientTlsFlags(base::FlagSet& flags, TlsOptions* tls);

// `peers` names whom the server also connects to, with the same files
// ("the stage servers", "the neighbour stages").
void AddServerTlsFlags(base::FlagSet& flags, TlsOptions* tls,
                       const std::string& peers);

}  // namespace petra::wire
