// petra: dispatches to a subcommand (client/commands.h).
#include <iostream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "services/base/crash_report.h"
#include "services/base/event_log.h"
#include "services/base/large_allocations.h"

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  petra::base::KeepLargeAllocationsInHeap();  // petra train runs stages
  // `petra train` runs a coordinator and stage servers in this process:
  // their warnings and errors (a recovery, a failure) go to standard error;
  // standard output stays the command's own.
  petra::base::InitEventLog(argv[0], /*to_stdout=*/false,
                            petra::base::LogLevel::kWarning);
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
