// The `petra` client's subcommands. Each takes the arguments after its name
// and returns the process exit code (0 ok, 1 failure, 2 bad usage).
#pragma once

#include <string>
#include <vector>

namespace petra::client {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::string& program, const std::vector<std::string>& args);
};

// Every subcommand, in the order --help lists them.
const std::vector<Command>& Commands();

// `petra --help`.
std::string TopLevelHelp();

}  // namespace petra::client
