// Where the integration tests find the programs they start, and the
// loopback address they bind them to.
#pragma once

#include <string>

namespace petra::testing {

inline const std::string kBin = PETRA_BIN_DIR;
inline const std::string kPetra = kBin + "/petra";
inline const std::string kPetraLocal = kBin + "/petra-local";
inline const std::string kStage = kBin + "/petra-stage-server";
inline const std::string kCoordinator = kBin + "/petra-coordinator";

inline std::string Loopback(int port) {
  return "127.0.0.1:" + std::to_string(port);
}

}  // namespace petra::testing
