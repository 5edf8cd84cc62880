// petra-local: the `petra` commands that build networks on this machine
// (train, profile, model-info, ...), which need libtorch; `petra` starts it
// for them (client/command_table.h). It runs every other command too.
#include "client/command_table.h"
#include "client/local_commands.h"
#include "services/base/crash_report.h"
#include "services/base/event_log.h"
#include "services/base/large_allocations.h"

namespace {

int RunLocal(const petra::client::Command& command, int argc, char** argv) {
  return petra::client::LocalCommand(command.name)("petra",
                                                   {argv + 2, argv + argc});
}

}  // namespace

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  petra::base::KeepLargeAllocationsInHeap();  // petra train runs stages
  // `petra train` runs a coordinator and stage servers in this process:
  // their warnings and errors (a recovery, a failure) go to standard error;
  // standard output stays the command's own.
  petra::base::InitEventLog(argv[0], /*to_stdout=*/false,
                            petra::base::LogLevel::kWarning);
  return petra::client::RunCommandLine(argc, argv, &RunLocal);
}
