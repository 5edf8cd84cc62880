// The life of a server program, written once for petra-stage-server and
// petra-coordinator (as Triton's core gives every front end one
// Create/Start/GracefulStop): main maps its flags to the server's Options,
// then hands over here.
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "services/base/crash_report.h"
#include "services/base/event_log.h"
#include "services/base/large_allocations.h"
#include "services/base/shutdown_signal.h"

namespace petra::base {

// First thing in a server's main: the crash report, large allocations kept
// in the heap, SIGINT/SIGTERM caught for a graceful stop.
inline void InitServerProcess(const char* argv0) {
  InstallCrashReport(argv0);
  KeepLargeAllocationsInHeap();
  InstallShutdownHandlers();
}

// What a started server serves, as its program announces it.
struct ServerAnnouncement {
  int port = 0;
  std::string listening;  // after the port, in parentheses
  std::string transport;  // security and who may call
  int metrics_port = 0;   // 0: none
  // The server_up event's fields beside program, port and metrics_port.
  std::vector<LogField> log_fields;
};

// Prints "<program> listening on port P (...)", its transport and metrics
// port (tests and scripts read the ports from these lines), and logs
// server_up.
inline void AnnounceServer(const std::string& program,
                           const ServerAnnouncement& a) {
  std::cout << program << " listening on port " << a.port << " (" << a.listening
            << ")" << std::endl;
  std::cout << program << " transport: " << a.transport << std::endl;
  if (a.metrics_port != 0) {
    std::cout << program << " metrics on port " << a.metrics_port << std::endl;
  }
  std::vector<LogField> fields = {
      {"program", program},
      {"port", absl::StrCat(a.port)},
      {"metrics_port", absl::StrCat(a.metrics_port)}};
  fields.insert(fields.end(), a.log_fields.begin(), a.log_fields.end());
  LogEventAt(__FILE__, __LINE__, LogLevel::kInfo, "server_up", fields);
}

// Starts the server `created` holds, announces what `announce` says it
// serves (AnnounceServer), waits for SIGINT or SIGTERM and stops it
// gracefully, saying so. Returns main's exit code: 1, with the reason after
// `argv0`, when it cannot be created or started.
template <typename Server, typename Announce>
int ServeUntilSignal(const char* argv0, const std::string& program,
                     absl::StatusOr<std::unique_ptr<Server>> created,
                     Announce&& announce) {
  if (!created.ok()) {
    std::cerr << argv0 << ": " << created.status().message() << "\n";
    return 1;
  }
  Server& server = **created;
  if (absl::Status s = server.Start(); !s.ok()) {
    std::cerr << argv0 << ": " << s.message() << "\n";
    return 1;
  }
  AnnounceServer(program, std::forward<Announce>(announce)(server));
  const int sig = WaitForShutdownSignal();
  std::cout << program << ": signal " << sig << ", stopping" << std::endl;
  PETRA_LOG_EVENT(kInfo, "server_stopping", {"signal", absl::StrCat(sig)});
  server.GracefulStop();
  std::cout << program << ": stopped" << std::endl;
  PETRA_LOG_EVENT(kInfo, "server_stopped");
  return 0;
}

}  // namespace petra::base
