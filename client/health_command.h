// The health check's command line, shared by `petra health` and the small
// `petra-health` probe binary (client/health_main.cc).
#pragma once

#include <string>
#include <vector>

namespace petra::client {

// `command` names the command in usage and errors ("petra health").
int RunHealthCheck(const std::string& command,
                   const std::vector<std::string>& args);
// `petra health`.
int RunHealth(const std::string& program, const std::vector<std::string>& args);

}  // namespace petra::client
