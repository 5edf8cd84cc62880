// The life of a server program, written once for petra-stage-server and
// petra-coordinator (as Triton's core gives every front end one
// Create/Start/GracefulStop): main maps its flags to the server's Options,
// then hands over here.
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <utility>

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

// Starts the server `created` holds, lets `announce` print and log what it
// serves (tests and scripts read the ports from those lines), waits for
// SIGINT or SIGTERM and stops it gracefully, saying so. Returns main's exit
// code: 1, with the reason after `argv0`, when it cannot be created or
// started.
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
  std::forward<Announce>(announce)(server);
  const int sig = WaitForShutdownSignal();
  std::cout << program << ": signal " << sig << ", stopping" << std::endl;
  PETRA_LOG_EVENT(kInfo, "server_stopping", {"signal", absl::StrCat(sig)});
  server.GracefulStop();
  std::cout << program << ": stopped" << std::endl;
  PETRA_LOG_EVENT(kInfo, "server_stopped");
  return 0;
}

}  // namespace petra::base
