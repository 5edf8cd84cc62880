// petra: runs the fleet's commands itself and hands those that compute on
// this machine to petra-local, beside it (client/command_table.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "client/command_table.h"
#include "services/base/crash_report.h"
#include "services/base/event_log.h"

namespace {

// Replaces this process with petra-local (the same pid: signals, exit
// codes and the terminal are the command's as before); returns only when
// that cannot start.
int ExecLocal(const petra::client::Command& command, int argc, char** argv) {
  std::error_code error;
  std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) self = argv[0];
  const std::string local = (self.parent_path() / "petra-local").string();
  argv[0] = const_cast<char*>(local.c_str());
  execv(local.c_str(), argv);
  std::cerr << "petra: '" << command.name
            << "' runs in petra-local, which could not be started from "
            << local << ": " << std::strerror(errno)
            << " (it is installed beside petra)\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  petra::base::InitEventLog(argv[0], /*to_stdout=*/false,
                            petra::base::LogLevel::kWarning);
  return petra::client::RunCommandLine(argc, argv, &ExecLocal);
}
