// petra-health: `petra health` as a binary of its own, linking gRPC but not
// libtorch, for the container and Kubernetes probes (docs/DEPLOY.md,
// "Probes": its cost against `petra health`'s).
#include <string>
#include <vector>

#include "client/health_command.h"
#include "services/base/crash_report.h"

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  return petra::client::RunHealthCheck(
      "petra-health", std::vector<std::string>(argv + 1, argv + argc));
}
