// StageClient over gRPC: StageService stubs with the coordinator's deadlines
// and TLS.
#pragma once

#include "coordinator/stage_client.h"
#include "services/wire/transport_security.h"

namespace petra::coordinator {

// Connects to stage servers with `security` (the coordinator's own
// certificate when TLS is on).
StageConnector GrpcStageConnector(const wire::TransportSecurity& security);

}  // namespace petra::coordinator
