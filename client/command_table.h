// The `petra` client's subcommands. Each takes the arguments after its name
// and returns the process exit code (0 ok, 1 failure, 2 bad usage).
//
// Two programs run them: `petra` runs the fleet's commands itself (gRPC and
// job specs: no libtorch, so `petra status` starts in milliseconds) and
// replaces itself with petra-local for those that build networks (train,
// profile, ...), whose libtorch takes most of a second to load.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace petra::client {

using CommandFn = int (*)(const std::string& program,
                          const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  // Runs in petra-local (needs libtorch), not in `petra` itself.
  bool local;
};

// Every subcommand, in the order --help lists them.
const std::vector<Command>& Commands();

// The command named `name`, or nullptr.
const Command* FindCommand(std::string_view name);

// The commands `petra` runs itself (those not `local`); nullptr for others.
CommandFn FleetCommand(std::string_view name);

// `petra --help`.
std::string TopLevelHelp();

// The main of both programs: help, an unknown command (exit 2), or the
// command named by argv[1], run by FleetCommand or, for a `local` one, by
// `run_local` (given argv whole).
int RunCommandLine(int argc, char** argv,
                   int (*run_local)(const Command& command, int argc,
                                    char** argv));

}  // namespace petra::client
