// This process's LinkEndpoint: what a neighbour needs to know to pick the
// data channel between them (transport_choice.h). Read once, at first use.
#pragma once

#include "absl/status/status.h"
#include "petra/v1/stage.pb.h"

namespace petra::link {

// The host's boot id, the /dev/shm this process sees (empty when none is
// usable: a ring cannot be made there), and the transports offered. The
// environment variable PETRA_TRANSPORTS (a list of grpc, grpc_bulk and
// shm, e.g. "grpc,shm") narrows the offer, e.g. to keep a server off
// shared memory.
const petra::v1::LinkEndpoint& LocalEndpoint();

// INVALID_ARGUMENT naming the variable when PETRA_TRANSPORTS holds anything
// but "grpc", "grpc_bulk" and "shm" (servers check it when they are
// created).
absl::Status CheckTransportsEnvironment();

}  // namespace petra::link
