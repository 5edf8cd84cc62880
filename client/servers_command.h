// `petra servers`: the fleet's stage servers as the coordinator sees them.
#pragma once

#include <string>
#include <vector>

namespace petra::client {

int RunServers(const std::string& program,
               const std::vector<std::string>& args);

}  // namespace petra::client
