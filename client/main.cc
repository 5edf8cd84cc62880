// petra: dispatches to a subcommand (client/commands.h).
#include <iostream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "services/cli/crash_report.h"
#include "services/cli/event_log.h"
#include "services/cli/large_allocations.h"

int main(int argc, char** argv) {
  petra::cli::InstallCrashReport(argv[0]);
  petra::cli::KeepLargeAllocationsInHeap();  // petra train runs stages
  // `petra train` runs a coordinator and stage servers in this process:
  // their warnings and errors (a recovery, a failure) go to standard error;
  // standard output stays the command's own.
  petra::cli::InitEventLog(argv[0], /*to_stdout=*/false,
                           petra::cli::LogLevel::kWarning);
  const std::string program = "petra";
  if (argc < 2) {
    std::cerr << petra::client::TopLevelHelp();
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    std::cout << petra::client::TopLevelHelp();
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const petra::client::Command& c : petra::client::Commands()) {
    if (name == c.name) return c.run(program, args);
  }
  std::cerr << program << ": unknown command '" << name
            << "'; run 'petra --help' for the list of commands\n";
  return 2;
}
