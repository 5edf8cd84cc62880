// StageClient over gRPC: StageService stubs with the coordinator's deadlines
// and TLS.
#pragma once

#include "coordinator/stage_client.h"
#include "services/wire/transport_security.h"

namespace petra::coordinator {

// Connects to stage servers with `security` (the coordinator's own
// certificate when TLS is on).
// `fleet_token`: sent as a bearer token on every call (stage servers with
// --fleet-token-file take control calls only with it); "" sends none.
StageConnector GrpcStageConnector(const wire::TransportSecurity& security,
                                  const std::string& fleet_token = "");

}  // namespace petra::coordinator
