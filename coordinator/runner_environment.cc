#include "coordinator/runner_environment.h"

#include "coordinator/grpc_stage_client.h"

namespace petra::coordinator {

StageConnector ConnectorOf(const RunnerEnvironment& env) {
  return env.connect ? env.connect
                     : GrpcStageConnector(env.security, env.fleet_token);
}

}  // namespace petra::coordinator
